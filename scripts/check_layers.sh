#!/usr/bin/env bash
# Fails (exit 1) naming each include that points up the folders' order, and each
# source file over its length: the folders import only downward,
#   core <- parallel <- models <- launch, and optim (which may use parallel and models) <- launch,
# no C++ file is over 500 lines and launch/trainer.cpp is at most 400.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [core]="core"
  [parallel]="core parallel"
  [models]="core parallel models"
  [optim]="core parallel models optim"
  [launch]="core parallel models optim launch"
)
problems=()
for folder in "${!allowed[@]}"; do
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<< "$line")
    [[ " ${allowed[$folder]} " == *" $target "* ]] || problems+=("$file includes $target/ (${folder}/ may include: ${allowed[$folder]})")
  done < <(git grep -n -E '^#include "[a-z_]+/' -- "$folder/*.h" "$folder/*.cpp" || true)
done
while IFS= read -r f; do
  lines=$(wc -l < "$f")
  limit=500
  [ "$f" = launch/trainer.cpp ] && limit=400
  [ "$lines" -le "$limit" ] || problems+=("$f has $lines lines (at most $limit)")
done < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ ${#problems[@]} -gt 0 ]; then
  printf 'check_layers: %s\n' "${problems[@]}" >&2
  exit 1
fi
echo "check_layers: every include points down the folders' order, every C++ file within its length"
