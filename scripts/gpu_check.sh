#!/usr/bin/env bash
# The GPU check, on a machine with a GPU, from what scripts/gpu_pack.sh packed: the GPU,
# then every CUDA kernel against its CPU kernel. Output also goes to $OUT when set.
# (Training on the GPU and its benchmark against PyTorch are not built yet.)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt"
export LD_LIBRARY_PATH="$PWD/gpu_pack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
gpu_pack/cuda_kernels_test 2>&1 | tee "$out/cuda_kernels_test.txt"
exit "${PIPESTATUS[0]}"
