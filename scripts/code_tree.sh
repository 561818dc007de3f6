#!/usr/bin/env bash
# The code's layers as docs/design.md draws them, counted from the sources: each library
# folder (and the programs in examples/), lowest first, its .h/.cc/.cu files and their
# lines, and the folders its sources include from: only folders above it in the list
# (CodeMap.TheLayersAreOneWay holds that); then the teaching core's six folders together.
# The doc test re-runs this, so the table in docs/design.md is the tree as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

folders=(core/runtime core/optim core/data core/model core/parallel core/train extensions
         lab/report lab/plan examples)
printf '%-14s %5s %7s  %s\n' folder files lines "includes from"
all_files=0 all_lines=0 core_files=0 core_lines=0
for folder in "${folders[@]}"; do
  mapfile -t sources < <(find -H "$folder" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sort)
  lines=$(cat "${sources[@]}" | wc -l)
  from=()
  for other in "${folders[@]}"; do
    if [ "$other" != "$folder" ] && grep -q "^#include \"$other/" "${sources[@]}"; then
      from+=("${other#*/}")
    fi
  done
  printf '%-14s %5d %7d  %s\n' "$folder/" "${#sources[@]}" "$lines" "${from[*]:-(none)}"
  all_files=$((all_files + ${#sources[@]})) all_lines=$((all_lines + lines))
  if [[ $folder == core/* ]]; then
    core_files=$((core_files + ${#sources[@]})) core_lines=$((core_lines + lines))
  fi
done
printf '%-14s %5d %7d\n' "core/ in all" "$core_files" "$core_lines" "in all" "$all_files" "$all_lines"
