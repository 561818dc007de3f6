#!/usr/bin/env bash
# The GPU check, on a machine with a GPU, from what scripts/gpu_pack.sh packed (about 8
# minutes on one H200). In the order that keeps the most when the time runs short:
#   1. the GPU; every CUDA kernel against its CPU kernel (cuda_kernels_test);
#   2. GPT-2 small (12 layers, 12 heads, C=768, T=1024, byte vocabulary, batch 8) trained
#      by tally_model_bench in fp32 and with TF32: tokens/s, the cuBLAS peak it
#      measures, and MFU; then, where PyTorch is installed, the same model and batch in
#      PyTorch eager with TF32 allowed, for the ratio;
#   3. Kernels on CUDA against Kernels on the CPU, training on the GPU against the CPU
#      run, and every strategy's ranks sharing the GPU (cuda_train_test); the NCCL
#      transport as far as one GPU goes: a world of one rank (nccl_test, and tally_train
#      --backend=nccl with ZeRO-1 over NCCL's own collectives); every collective on GPU
#      buffers (tally_bench: two thread ranks sharing the GPU, and one NCCL rank); the 3D
#      demo's grid on the GPU (tally_train).
# Every output also goes to $OUT (default /tmp), as it is written.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
status=0
# Runs "$@" with a time limit of $1 seconds, its output also into $out/$2.
step() {
  local seconds="$1" file="$2"
  shift 2
  timeout "$seconds" "$@" 2>&1 | tee -a "$out/$file"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt"
[ -d gpu_pack/lib ] || tar -C gpu_pack -xJf gpu_pack/lib.tar.xz
# NCCL: the toolkit's, or the one PyTorch's packages bring (nvidia-nccl).
nccl_lib="$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0] + "/lib")' 2> /dev/null)"
export LD_LIBRARY_PATH="$PWD/gpu_pack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${nccl_lib:+$nccl_lib:}${LD_LIBRARY_PATH:-}"

step 90 cuda_kernels_test.txt gpu_pack/cuda_kernels_test

gpt2=(--n_layer=12 --n_head=12 --n_embd=768 --seq_len=1024 --batch=8 --warmup=2 --steps=10)
step 100 tally_gpt2.txt gpu_pack/tally_model_bench --device=cuda "${gpt2[@]}" \
  --json="$out/tally_gpt2.json"
step 100 tally_gpt2.txt gpu_pack/tally_model_bench --device=cuda --tf32 "${gpt2[@]}" \
  --json="$out/tally_gpt2_tf32.json"
if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  step 100 torch_gpt2.txt python3 gpu_pack/torch_gpt.py --device cuda --tf32 --n_layer 12 \
    --n_head 12 --n_embd 768 --seq_len 1024 --batch 8 --warmup 2 --steps 10
else
  echo "PyTorch with CUDA is not installed here: no side-by-side run" | tee "$out/torch_gpt2.txt"
fi

step 150 cuda_train_test.txt gpu_pack/cuda_train_test
step 60 nccl_test.txt gpu_pack/nccl_test
# One rank over NCCL: its communicators, and ZeRO-1's reduce-scatter and all-gather as
# NCCL's own collectives.
step 45 tally_train_nccl.txt gpu_pack/tally_train --device=cuda --backend=nccl --zero=1 \
  --native_collectives --steps=5 --eval_every=0 --sample_bytes=0
# Every collective on GPU buffers, checked against the closed form and the exact bytes:
# two thread ranks sharing the GPU (cudaMemcpy and reduction kernels), then one NCCL rank.
step 45 tally_bench_gpu.txt gpu_pack/tally_bench --device=cuda --op=all --algorithm=all \
  -b 4 -e 64M -f 16 -n 5 -w 2
step 30 tally_bench_nccl.txt gpu_pack/tally_bench --device=cuda --backend=nccl --ranks=1 \
  --op=all --algorithm=all -b 4 -e 1M -f 16 -n 2 -w 1
# The 3D demo's grid, every rank on the one GPU, 10 steps: the report's bytes and memory.
step 60 tally_train_3d.txt gpu_pack/tally_train --device=cuda --dp=2 --tp=2 --pp=2 --zero=1 \
  --sequence_parallel --micro_batch_size=2 --steps=10 --eval_every=0 --sample_bytes=32
# Mixed precision on the GPU: the bf16 kernels (conversions, cuBLAS's bf16 GEMM, bf16
# gradients in the optimizer) in the 3D grid, and GPT-2 small's tokens/s in fp32 and bf16
# (against PyTorch's bf16 autocast where it is installed with CUDA).
step 60 tally_train_3d_bf16.txt gpu_pack/tally_train --device=cuda --precision=bf16 --dp=2 \
  --tp=2 --pp=2 --zero=1 --sequence_parallel --micro_batch_size=2 --steps=10 --eval_every=0 \
  --sample_bytes=32
step 100 tally_gpt2_bf16.txt gpu_pack/tally_model_bench --device=cuda --tf32 \
  --precision=fp32,bf16 "${gpt2[@]}" --json="$out/tally_gpt2_bf16.json"
if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  step 100 torch_gpt2_bf16.txt python3 gpu_pack/torch_gpt.py --device cuda --precision bf16 \
    --n_layer 12 --n_head 12 --n_embd 768 --seq_len 1024 --batch 8 --warmup 2 --steps 10
fi
exit "$status"
