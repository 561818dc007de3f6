#!/usr/bin/env bash
# The GPU check, on a machine with a GPU, from what scripts/gpu_pack.sh packed (about 8
# minutes on one H200):
#   1. the GPU; every CUDA kernel against its CPU kernel; Kernels on CUDA against Kernels
#      on the CPU; training on the GPU against the CPU run, and every strategy's ranks
#      sharing the GPU (cuda_train_test); the NCCL transport as far as one GPU goes: a
#      world of one rank (nccl_test, and tally_train --backend=nccl with ZeRO-1 over
#      NCCL's own collectives); the 3D demo's grid on the GPU (tally_train);
#   2. GPT-2 small (12 layers, 12 heads, C=768, T=1024, byte vocabulary, batch 8) trained
#      by tally_model_bench in fp32 and with TF32: tokens/s, the cuBLAS peak it
#      measures, and MFU; then, where PyTorch is installed, the same model and batch in
#      PyTorch eager with TF32 allowed, for the ratio.
# Every output also goes to $OUT (default /tmp).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt"
# NCCL: the toolkit's, or the one PyTorch's packages bring (nvidia-nccl).
nccl_lib="$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0] + "/lib")' 2> /dev/null)"
export LD_LIBRARY_PATH="$PWD/gpu_pack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${nccl_lib:+$nccl_lib:}${LD_LIBRARY_PATH:-}"
for test in cuda_kernels_test cuda_train_test nccl_test; do
  timeout 150 "gpu_pack/$test" 2>&1 | tee "$out/$test.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
# One rank over NCCL: its communicators, and ZeRO-1's reduce-scatter and all-gather as
# NCCL's own collectives.
timeout 60 gpu_pack/tally_train --device=cuda --backend=nccl --zero=1 --native_collectives \
  --steps=5 --eval_every=0 --sample_bytes=0 2>&1 | tee "$out/tally_train_nccl.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# The 3D demo's grid, every rank on the one GPU, 10 steps: the report's bytes and memory.
timeout 90 gpu_pack/tally_train --device=cuda --dp=2 --tp=2 --pp=2 --zero=1 --sequence_parallel \
  --micro_batch_size=2 --steps=10 --eval_every=0 --sample_bytes=32 2>&1 | tee "$out/tally_train_3d.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
gpt2=(--n_layer=12 --n_head=12 --n_embd=768 --seq_len=1024 --batch=8 --warmup=2 --steps=10)
for precision in "" "--tf32"; do
  timeout 120 gpu_pack/tally_model_bench --device=cuda $precision "${gpt2[@]}" \
    --json="$out/tally_gpt2${precision:+_tf32}.json" 2>&1 | tee -a "$out/tally_gpt2.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  timeout 120 python3 gpu_pack/torch_gpt.py --device cuda --tf32 --n_layer 12 --n_head 12 \
    --n_embd 768 --seq_len 1024 --batch 8 --warmup 2 --steps 10 2>&1 | tee "$out/torch_gpt2.txt"
else
  echo "PyTorch with CUDA is not installed here: no side-by-side run" | tee "$out/torch_gpt2.txt"
fi
exit "$status"
