#!/usr/bin/env bash
# Installs what tally needs to build and test on Debian 12 (run as root), then configures
# and builds the Release tree in build/: the targets given (scripts/setup.sh tally_train),
# or everything. Ninja prints its progress, a line a file. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the report page's test loads the page in it, headless. ccache: the compiler
# cache the build uses when it is there (CMakeLists.txt).
packages=(cmake ninja-build g++ pkg-config ccache libabsl-dev libgtest-dev libopenblas-dev libdnnl-dev openmpi-bin libopenmpi-dev chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
if [ $# -gt 0 ]; then
  echo "building $* (Release, build/)"
  cmake --build build -j2 --target "$@"
else
  echo "building every program and test (Release, build/)"
  cmake --build build -j2
fi
