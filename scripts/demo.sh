#!/usr/bin/env bash
# The main job: install, build, train a GPT on the embedded corpus (flags pass through to
# tally_train, e.g. scripts/demo.sh --steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh > /dev/null
exec build/examples/tally_train "$@"
