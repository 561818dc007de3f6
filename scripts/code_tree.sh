#!/usr/bin/env bash
# The code's layers as docs/design.md draws them, counted from the sources: each library
# folder (and the programs in examples/), lowest first, its .h/.cc/.cu files and their
# lines, and the folders its sources include from: only folders above it in the list
# (CodeMap.TheLayersAreOneWay holds that). The doc test re-runs this, so the table in
# docs/design.md is the tree as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

folders=(runtime optim data model parallel train extensions report plan examples)
printf '%-12s %5s %7s  %s\n' folder files lines "includes from"
all_files=0 all_lines=0
for folder in "${folders[@]}"; do
  mapfile -t sources < <(find -H "$folder" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sort)
  lines=$(cat "${sources[@]}" | wc -l)
  included=$(grep -ho '^#include "[a-z_]*/' "${sources[@]}" | sed 's/^#include "//; s/\/$//' | sort -u)
  from=()
  for other in "${folders[@]}"; do
    if [ "$other" != "$folder" ] && grep -qx "$other" <<<"$included"; then from+=("$other"); fi
  done
  printf '%-12s %5d %7d  %s\n' "$folder/" "${#sources[@]}" "$lines" "${from[*]:-(none)}"
  all_files=$((all_files + ${#sources[@]})) all_lines=$((all_lines + lines))
done
printf '%-12s %5d %7d\n' "in all" "$all_files" "$all_lines"
