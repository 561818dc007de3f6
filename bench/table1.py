"""Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM"), Table 1, against tally_plan's predicted step on the a100 cluster.

    python3 bench/table1.py [--plan build/examples/tally_plan] [--cluster a100] [--json]
                            [--dry_run_gpus N [--train build/examples/tally_train]]

Each row's run settings are those of Megatron-LM's examples/sc21/run_table_1.sh (tensor
and pipeline sizes, micro-batch and global batch, layers, hidden size, heads, layers per
virtual stage; every row recomputes activations); all use s = 2048 and V = 51200 on
nodes of 8 A100s. The paper's achieved teraFLOP/s per GPU are its Table 1 column,
counted by its eq. 3 (96·B·s·l·h²·(1 + s/6h + V/16lh)); the predicted ones are that
count over tally_plan's predicted step for the same grid (`predicted_step` of its
--json), on tally's GPT of the same shape (tied embeddings, 4h GELU MLP). Every row
recomputes as the paper's runs do (--checkpoint-activations: Megatron's uniform method,
one layer a checkpoint; tally's --recompute --recompute_method=layer: each layer's
forward again before its backward, the LM head's not) and uses the paper's
scatter/gather of the pipeline boundary (--pp_scatter_gather).

With --dry_run_gpus N, every row of at most N GPUs is also run dry (tally_train
--dry_run, one step, one thread rank a GPU, on this machine): its wall time here, and
its replayed step on the same cluster beside the planner's.
"""
import re
import time
import argparse
import json
import subprocess
import sys

# billions, heads, hidden, layers, tp, pp, GPUs, global batch, micro-batch,
# layers per virtual stage (0: not interleaved), the paper's TFLOP/s per GPU
ROWS = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 16, 0, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 16, 0, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 16, 0, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 8, 0, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 4, 0, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 2, 5, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 2, 5, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 1, 3, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 1, 1, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 1, 0, 163),
]


def plan_flags(row, cluster):
    size, heads, hidden, layers, tp, pp, gpus, batch, micro, per_chunk, _ = row
    dp = gpus // (tp * pp)
    v = layers // pp // per_chunk if per_chunk else 1
    return [f"--n_layer={layers}", f"--n_embd={hidden}", f"--n_head={heads}",
            "--vocab_size=51200", "--seq_len=2048", f"--dp={dp}", f"--tp={tp}", f"--pp={pp}",
            f"--batch_size={batch // dp}", f"--micro_batches={batch // (dp * micro)}",
            f"--virtual_stages={v}", "--recompute", "--recompute_method=layer",
            "--pp_scatter_gather", "--precision=bf16",
            "--gpus_per_node=8",
            f"--cluster={cluster}", "--json"]


def dry_run_flags(row, cluster):
    size, heads, hidden, layers, tp, pp, gpus, batch, micro, per_chunk, _ = row
    dp = gpus // (tp * pp)
    flags = ["--dry_run", "--steps=1", "--eval_every=0", "--sample_bytes=0",
             f"--n_layer={layers}", f"--n_embd={hidden}", f"--n_head={heads}", "--vocab_size=51200",
             "--seq_len=2048", f"--dp={dp}", f"--tp={tp}", f"--pp={pp}",
             f"--global_batch_size={batch}", f"--micro_batch_size={micro}", "--recompute",
             "--precision=bf16", "--gpus_per_node=8", f"--cluster={cluster}",
             "--timeout_s=3600"]  # thousands of thread ranks wait minutes for a core
    if pp > 1:
        flags += ["--recompute_method=layer"]
    if pp > 1 and tp > 1:
        flags += ["--pp_scatter_gather"]
    if per_chunk:
        flags += ["--schedule=interleaved", f"--virtual_stages={layers // pp // per_chunk}"]
    return flags


def dry_run(train, row, cluster):
    """(wall seconds on this machine, the replayed step in seconds) of the row's dry run."""
    start = time.monotonic()
    run = subprocess.run([train] + dry_run_flags(row, cluster), capture_output=True, text=True)
    wall = time.monotonic() - start
    if run.returncode != 0:
        sys.exit(f"tally_train --dry_run failed on the {row[0]}B row: {run.stderr.strip()[-500:]}")
    found = re.search(r"^predicted step: ([0-9.]+) ms", run.stdout, re.M)
    if not found:
        sys.exit(f"no predicted step in the {row[0]}B row's dry run")
    return wall, float(found.group(1)) / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", default="build/examples/tally_plan")
    parser.add_argument("--cluster", default="a100")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--dry_run_gpus", type=int, default=0,
                        help="also run dry every row of at most this many GPUs")
    parser.add_argument("--train", default="build/examples/tally_train")
    args = parser.parse_args()
    out = []
    for row in ROWS:
        run = subprocess.run([args.plan] + plan_flags(row, args.cluster), capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"tally_plan failed on the {row[0]}B row: {run.stderr.strip()}")
        step = json.loads(run.stdout)["predicted_step"]
        out.append({"billions": row[0], "tp": row[4], "pp": row[5], "gpus": row[6],
                    "paper_tflops_per_gpu": row[10], "predicted_tflops_per_gpu": step["tflops_per_gpu"],
                    "predicted_step_s": step["step_s"], "bubble": step["bubble"],
                    "compute_s": step["compute_s"], "fill_s": step["fill_s"], "comm_s": step["comm_s"]})
        if row[6] <= args.dry_run_gpus:
            wall, replayed = dry_run(args.train, row, args.cluster)
            out[-1].update({"dry_run_wall_s": wall, "replayed_step_s": replayed})
    errors = [abs(r["predicted_tflops_per_gpu"] / r["paper_tflops_per_gpu"] - 1) for r in out]
    if args.json:
        print(json.dumps({"cluster": args.cluster, "rows": out,
                          "mean_abs_error": sum(errors) / len(errors), "max_abs_error": max(errors)}))
        return
    print(f"Narayanan et al. 2021, Table 1, against tally_plan on --cluster={args.cluster} "
          "(TFLOP/s per GPU by the paper's eq. 3; modelled clock)")
    print(f"{'params':>8} {'tp':>3} {'pp':>3} {'GPUs':>5} {'paper':>7} {'tally':>7} {'ratio':>6} "
          f"{'step s':>9} {'compute s':>10} {'fill s':>7} {'comm s':>8} {'bubble':>7}")
    for r in out:
        print(f"{r['billions']:>7.1f}B {r['tp']:>3} {r['pp']:>3} {r['gpus']:>5} "
              f"{r['paper_tflops_per_gpu']:>7.0f} {r['predicted_tflops_per_gpu']:>7.1f} "
              f"{r['predicted_tflops_per_gpu'] / r['paper_tflops_per_gpu']:>6.2f} "
              f"{r['predicted_step_s']:>9.3f} {r['compute_s']:>10.3f} {r['fill_s']:>7.3f} {r['comm_s']:>8.3f} "
              f"{r['bubble']:>7.3f}")
    within = sum(e <= 0.10 for e in errors)
    print(f"mean |error| {100 * sum(errors) / len(errors):.1f}%, largest {100 * max(errors):.1f}%, "
          f"{within} of {len(out)} rows within 10%")
    dry = [r for r in out if "replayed_step_s" in r]
    if dry:
        print("\ndry runs on this machine (tally_train --dry_run, one step; the replayed step on the "
              "same cluster, modelled clock)")
        print(f"{'params':>8} {'GPUs':>5} {'wall s':>8} {'replayed s':>11} {'planned s':>10} {'ratio':>7}")
        for r in dry:
            print(f"{r['billions']:>7.1f}B {r['gpus']:>5} {r['dry_run_wall_s']:>8.1f} "
                  f"{r['replayed_step_s']:>11.3f} {r['predicted_step_s']:>10.3f} "
                  f"{r['predicted_step_s'] / r['replayed_step_s']:>7.4f}")


if __name__ == "__main__":
    main()
