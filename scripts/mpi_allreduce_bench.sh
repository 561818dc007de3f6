#!/usr/bin/env bash
# tally's all-reduce against MPI_Allreduce on 2 processes, by size: each size is timed by
# its own short mpirun, tally's and MPI's alternately, --repeats times, and the best
# mean of each kept, so that a noisy machine's slow spells hit both alike.
#
#   scripts/mpi_allreduce_bench.sh [--repeats=5] [--small_allreduce_bytes=65536]
#
# Columns: size, tally's best time (µs) and the algorithm that ran (the ring, or recursive
# doubling up to --small_allreduce_bytes), MPI_Allreduce's best time (µs), and MPI's time
# over tally's (above 1: tally is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=5
small=65536
for arg in "$@"; do
  case "$arg" in
    --repeats=*) repeats="${arg#*=}" ;;
    --small_allreduce_bytes=*) small="${arg#*=}" ;;
    *) echo "usage: $0 [--repeats=N] [--small_allreduce_bytes=B]" >&2; exit 2 ;;
  esac
done
bench=build/examples/tally_bench
mpirun=(mpirun -np 2)
[[ $(id -u) == 0 ]] && mpirun+=(--allow-run-as-root)

# One size, one algorithm: "algorithm time_us" of the row.
time_of() {
  local bytes=$1 algorithm=$2 iterations=$(( $1 <= 65536 ? 5000 : $1 <= 1048576 ? 500 : 100 ))
  "${mpirun[@]}" "$bench" --backend=mpi --algorithm="$algorithm" \
      --small_allreduce_bytes="$small" -b "$bytes" -e "$bytes" -n "$iterations" \
      -w $(( iterations / 10 )) -c 0 | awk '$1 == "all_reduce" { print $2, $8 }'
}

echo "# tally_bench all_reduce on 2 MPI processes, best of $repeats alternating runs" \
     "($(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
printf "%10s %12s %10s %14s %10s\n" size tally_us algorithm mpi_us mpi/tally
for bytes in 1024 4096 16384 65536 262144 1048576 4194304; do
  best_tally="" best_mpi="" algorithm=""
  for (( r = 0; r < repeats; r++ )); do
    read -r algorithm t < <(time_of "$bytes" ring)
    read -r _ m < <(time_of "$bytes" native)
    best_tally=$(awk -v a="$t" -v b="$best_tally" 'BEGIN { print (b == "" || a < b) ? a : b }')
    best_mpi=$(awk -v a="$m" -v b="$best_mpi" 'BEGIN { print (b == "" || a < b) ? a : b }')
  done
  awk -v s="$bytes" -v t="$best_tally" -v al="$algorithm" -v m="$best_mpi" \
      'BEGIN { printf "%10d %12.2f %10s %14.2f %10.2f\n", s, t, al, m, m / t }'
done
