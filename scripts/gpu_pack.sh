#!/usr/bin/env bash
# Packs the GPU check into gpu_pack/ (ignored by git), built here, for a GPU machine that
# has the CUDA driver and toolkit but not Abseil, GoogleTest or OpenBLAS: the test and
# benchmark binaries, bench/torch_gpt.py, and every shared library they load that is
# neither CUDA's (NCCL's too: gpu_check.sh finds the GPU machine's own) nor the C
# library's (OpenBLAS and oneDNN alone are 75 MB: the libraries travel as one xz archive,
# which gpu_check.sh unpacks). Then run scripts/gpu_check.sh there with gpu_pack/ carried.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh > /dev/null
rm -rf gpu_pack
mkdir -p gpu_pack/lib
binaries=(build/tests/cuda_kernels_test build/tests/cuda_train_test build/tests/nccl_test
          build/examples/tally_model_bench build/examples/tally_train build/examples/tally_bench)
cp "${binaries[@]}" bench/torch_gpt.py gpu_pack/
for binary in "${binaries[@]}"; do
  for lib in $(ldd "$binary" | awk '$3 ~ /^\// {print $3}'); do
    case "$(basename "$lib")" in
      libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda* | libcublas* | libnccl*) ;;
      *) cp -L "$lib" gpu_pack/lib/ ;;
    esac
  done
done
tar -C gpu_pack -cf - lib | xz -T2 -6 > gpu_pack/lib.tar.xz
rm -rf gpu_pack/lib
du -sh gpu_pack
