#!/usr/bin/env bash
# "Flip a flag, see the bytes": the default model for 10 steps under each strategy's flags,
# every run's JSON report in a directory, then tally_compare puts them side by side
# (traffic per group, primitive and phase; memory; time), each against the first of its
# table: the data-parallel runs, tensor parallelism without and with sequence parallelism,
# the pipeline's two schedules, context parallelism's three ways (and with --html those
# eleven on one page), and a long sequence on four ranks.
#
#   scripts/flip_a_flag.sh [DIR] [--html=PAGE]      (DIR: a new temporary one by default)
#
# Flags of the runs, in order (the README's table): --dp=4; --dp=4 --allreduce=naive;
# --dp=4 --zero=1; --dp=4 --zero=3; --tp=2; --tp=2 --sequence_parallel; --pp=2
# --micro_batch_size=1 with 1f1b, then gpipe; --cp=4 with p2p, allgather and a2a. Then a
# long sequence on 4 ranks, 2 a node (docs/context_parallel.md's table): one step at
# --seq_len=1024 of --tp=4 --sequence_parallel, --cp=4 in each variant, --dp=4 --zero=3.
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
  "cp4_p2p:--cp=4"
  "cp4_allgather:--cp=4 --cp_comm=allgather"
  "cp4_a2a:--cp=4 --cp_comm=a2a"
)
# Runs each "name:flags" of the array named $1 with the flags after it, each report in
# $dir/name.json; `made` lists them.
run_all() {
  local -n specs=$1
  shift
  made=()
  for run in "${specs[@]}"; do
    local name=${run%%:*} flags
    read -r -a flags <<< "${run#*:}"
    build/examples/tally_train "${flags[@]}" "$@" --traffic_json="$dir/$name.json" \
      > "$dir/$name.log"
    made+=("$dir/$name.json")
  done
}
run_all runs --steps=10 --eval_every=0 --sample_bytes=0
files=("${made[@]}")
echo "# runs in $dir"
# Four tables: data parallelism and ZeRO; sequence parallelism; the pipeline's schedules;
# context parallelism's three ways; then the long sequence's.
build/examples/tally_compare "${files[@]:0:4}"
echo
build/examples/tally_compare "${files[@]:4:2}"
echo
build/examples/tally_compare "${files[@]:6:2}"
echo
build/examples/tally_compare "${files[@]:8:3}"
long=(
  "long_tp4_sp:--tp=4 --sequence_parallel"
  "long_cp4_p2p:--cp=4"
  "long_cp4_allgather:--cp=4 --cp_comm=allgather"
  "long_cp4_a2a:--cp=4 --cp_comm=a2a"
  "long_dp4_zero3:--dp=4 --zero=3"
)
run_all long --steps=1 --seq_len=1024 --global_batch_size=4 --eval_every=0 --sample_bytes=0 \
  --gpus_per_node=2 --cluster=a100
echo
build/examples/tally_compare "${made[@]}"
if [[ ${#compare_flags[@]} -gt 0 ]]; then  # the page has them all side by side
  build/examples/tally_compare "${compare_flags[@]}" "${files[@]}" > /dev/null
fi
