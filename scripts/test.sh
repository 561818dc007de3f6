#!/usr/bin/env bash
# The whole test suite, as CI runs it (docs/testing.md has each phase's time):
#   1. install and build everything (Release, build/; scripts/setup.sh), run every test;
#   2. build the communication, tensor-parallel and multi-rank training tests under
#      ThreadSanitizer (build-tsan/) and run their small form;
#   3. build the checkpoint fuzz test under AddressSanitizer and UBSan (build-asan/), run it.
# Each phase says its name and the time since the start. A failed build stops the script;
# failed tests do not: every pass runs, then one line says "N passed, N failed" over all of
# them, and the exit code is 1 if any test failed.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() { printf '\n== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
passed=0 failed=0 skipped=0 failed_names=()

# run_tests TREE [ctest arguments]: one ctest pass over TREE, counted into the totals; each
# test's time is in TREE/Testing/junit.xml (docs/testing.md lists the slowest from it).
run_tests() {
  local tree=$1 log
  shift
  log=$(mktemp)
  ctest --test-dir "$tree" -j2 --output-on-failure --output-junit Testing/junit.xml "$@" 2>&1 |
    tee "$log" || true
  # "100% tests passed, 0 tests failed out of 1145", then one line per failed or skipped test.
  local summary total bad skips
  summary=$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$log" | tail -1 || true)
  if [ -z "$summary" ]; then
    echo "ctest in $tree ended without its summary line"
    failed=$((failed + 1)) failed_names+=("$tree: ctest")
    rm -f "$log"
    return
  fi
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
  bad=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$summary")
  skips=$(grep -cE '^\s+[0-9]+ - .*\(Skipped\)$' "$log" || true)
  passed=$((passed + total - bad - skips)) failed=$((failed + bad)) skipped=$((skipped + skips))
  while read -r name; do
    [ -n "$name" ] && failed_names+=("$tree: $name")
  done < <(grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Not Run|OTHER_FAULT|Child aborted|ILLEGAL|BAD_COMMAND)' "$log" |
           sed -E 's/^\s+[0-9]+ - //')
  rm -f "$log"
}

phase "Release: install what is missing, configure and build everything (build/)"
scripts/setup.sh
phase "Release: every test"
run_tests build

# ThreadSanitizer watches what has threads: the transports, communicators and progress
# thread (comm), the layers over thread ranks (parallel), the trainer's ranks, the
# pipeline executor and overlap (train). The planner and the report are single-threaded;
# their tests run in the Release pass.
phase "ThreadSanitizer: configure and build (build-tsan/)"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_SANITIZE=thread > /dev/null
cmake --build build-tsan -j2 --target comm_test parallel_test train_test
phase "ThreadSanitizer: the communication, parallel and training tests (small form)"
TSAN_OPTIONS="halt_on_error=1" run_tests build-tsan -L "comm|parallel|train"

phase "AddressSanitizer + UBSan: configure and build (build-asan/)"
# One test file: the tests' precompiled headers would cost more than they save.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_SANITIZE=address \
  -DTALLY_TEST_PCH=OFF > /dev/null
cmake --build build-asan -j2 --target checkpoint_fuzz_test
phase "AddressSanitizer + UBSan: the checkpoint fuzz test"
run_tests build-asan -L fuzz

phase "done"
for name in "${failed_names[@]+"${failed_names[@]}"}"; do echo "failed: $name"; done
echo "$passed passed, $failed failed ($skipped skipped: without a GPU, or not in a sanitizer's small form)"
[ "$failed" -eq 0 ]
