#!/usr/bin/env bash
# "Flip a flag, see the bytes": the default model for 10 steps under each strategy's flags,
# every run's JSON report in a directory, then tally_compare puts them side by side
# (traffic per group, primitive and phase; memory; time), each against the first of its
# table: the data-parallel runs, tensor parallelism without and with sequence parallelism,
# the pipeline's two schedules (and with --html all eight on one page).
#
#   scripts/flip_a_flag.sh [DIR] [--html=PAGE]      (DIR: a new temporary one by default)
#
# Flags of the runs, in order (the README's table): --dp=4; --dp=4 --allreduce=naive;
# --dp=4 --zero=1; --dp=4 --zero=3; --tp=2; --tp=2 --sequence_parallel; --pp=2
# --micro_batch_size=1 with 1f1b, then gpipe.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=""
compare_flags=()
for arg in "$@"; do
  case "$arg" in
    --html=*) compare_flags+=("$arg") ;;
    -*) echo "usage: $0 [DIR] [--html=PAGE]" >&2; exit 2 ;;
    *) dir="$arg" ;;
  esac
done
[[ -n "$dir" ]] || dir=$(mktemp -d)
mkdir -p "$dir"
runs=(
  "dp4:--dp=4"
  "dp4_naive:--dp=4 --allreduce=naive"
  "dp4_zero1:--dp=4 --zero=1"
  "dp4_zero3:--dp=4 --zero=3"
  "tp2:--tp=2"
  "tp2_sp:--tp=2 --sequence_parallel"
  "pp2_1f1b:--pp=2 --micro_batch_size=1"
  "pp2_gpipe:--pp=2 --micro_batch_size=1 --schedule=gpipe"
)
files=()
for run in "${runs[@]}"; do
  name=${run%%:*}
  read -r -a flags <<< "${run#*:}"
  build/examples/tally_train "${flags[@]}" --steps=10 --eval_every=0 --sample_bytes=0 \
    --traffic_json="$dir/$name.json" > "$dir/$name.log"
  files+=("$dir/$name.json")
done
echo "# runs in $dir"
# Three tables: data parallelism and ZeRO; sequence parallelism; the pipeline's schedules.
build/examples/tally_compare "${files[@]:0:4}"
echo
build/examples/tally_compare "${files[@]:4:2}"
echo
build/examples/tally_compare "${files[@]:6:2}"
if [[ ${#compare_flags[@]} -gt 0 ]]; then  # the page has them all side by side
  build/examples/tally_compare "${compare_flags[@]}" "${files[@]}" > /dev/null
fi
