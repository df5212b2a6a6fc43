#!/usr/bin/env bash
# Fails (exit 1) naming the C++ files that clang-format (.clang-format, Debian's
# clang-format 14) would change. Fix them with:
#   git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=()
while IFS= read -r f; do
  clang-format --dry-run --Werror "$f" > /dev/null 2>&1 || unformatted+=("$f")
done < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "check_format: clang-format would change ${#unformatted[@]} file(s): ${unformatted[*]}" >&2
  exit 1
fi
echo "check_format: every C++ file is clang-formatted"
