#!/usr/bin/env bash
# The main job: install, build, and train a GPT on the embedded corpus on 8 thread ranks,
# dp 2 x tp 2 x pp 2 with ZeRO-1, sequence parallelism and the 1F1B schedule, then print
# the traffic, time and memory report. Flags pass through to tally_train and override
# these (e.g. scripts/demo.sh --dp=1 --tp=1 --pp=1 --zero=0 --steps=200: one rank).
set -euo pipefail
cd "$(dirname "$0")/.."
# The first run builds tally_train alone (scripts/test.sh builds the rest), showing
# ninja's progress; a later run finds it built and starts at once.
scripts/setup.sh tally_train
exec build/examples/tally_train --dp=2 --tp=2 --pp=2 --zero=1 --sequence_parallel --schedule=1f1b \
  --micro_batch_size=2 --steps=60 --eval_every=30 "$@"
