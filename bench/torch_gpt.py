"""The tally_model_bench model in PyTorch eager, for a side-by-side tokens/s.

    python3 bench/torch_gpt.py --threads 1,2 --steps 10
    python3 bench/torch_gpt.py --threads 1,2 --precision bf16    # autocast, as tally's bf16
    python3 bench/torch_gpt.py --device cuda --tf32 --n_layer 12 --n_head 12 \
        --n_embd 768 --seq_len 1024 --batch 8        # GPT-2 small on a GPU

Same architecture as tally's GPT (pre-LayerNorm blocks, fused QKV, causal attention,
4C tanh-GELU MLP, tied LM head, mean cross-entropy), same sizes (L=4, H=4, C=256, T=128,
batch 8), AdamW(betas 0.9/0.95, weight decay 0.1 on 2-D weights), gradient clipping at
1, fp32 (--tf32: TF32 matmuls allowed, as tally_model_bench --tf32; --precision bf16:
forward under torch.autocast(bfloat16), PyTorch's mixed precision: bf16 matmuls, fp32
weights and optimizer, which is what tally's --precision=bf16 computes, with fp32 rather
than bf16 weights kept). Eager mode, no fused kernels: the framework tally is compared with. Tokens are random bytes:
throughput does not depend on the data.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        hs = c // self.n_head
        q, k, v = (z.view(b, t, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, c, t, v=256):
        super().__init__()
        self.wte = nn.Embedding(v, c)
        self.wpe = nn.Embedding(t, c)
        self.h = nn.ModuleList(Block(c, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def measure(threads, args):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = GPT(args.n_layer, args.n_head, args.n_embd, args.seq_len).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    x = torch.randint(0, 256, (args.batch, args.seq_len), device=device)
    y = torch.randint(0, 256, (args.batch, args.seq_len), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    elapsed = 0.0
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if step >= args.warmup:
            elapsed += time.perf_counter() - start
    return args.steps * args.batch * args.seq_len / elapsed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--n_layer", type=int, default=4)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--n_embd", type=int, default=256)
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    matmuls = "bf16 (autocast)" if args.precision == "bf16" else "TF32" if args.tf32 else "fp32"
    print(f"torch {torch.__version__}, {args.device}, matmuls {matmuls}")
    if args.device == "cuda":
        args.threads = "1"
    print(f"{'threads':>8} {'tokens/s':>12}")
    for t in (int(s) for s in args.threads.split(",")):
        print(f"{t:>8} {measure(t, args):>12.0f}", flush=True)


if __name__ == "__main__":
    main()
