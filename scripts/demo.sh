#!/usr/bin/env bash
# The main job: install, build, run the collective demo (extra flags pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh > /dev/null
exec build/examples/tally_demo "$@"
