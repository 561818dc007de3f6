#!/usr/bin/env bash
# The whole test suite: install, build (Release), run every test; then rebuild the
# communication, tensor-parallel, multi-rank training, report and planner tests under
# ThreadSanitizer and run them again, and the checkpoint fuzz test under AddressSanitizer
# and UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build -j2 --output-on-failure

cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_SANITIZE=thread > /dev/null
cmake --build build-tsan -j2 --target comm_test parallel_test train_test report_test plan_test
TSAN_OPTIONS="halt_on_error=1" ctest --test-dir build-tsan -L "comm|parallel|train|report|plan" -j2 --output-on-failure

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_SANITIZE=address > /dev/null
cmake --build build-asan -j2 --target checkpoint_fuzz_test
ctest --test-dir build-asan -L fuzz --output-on-failure
