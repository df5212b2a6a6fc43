#!/bin/sh
# The C++ compiler launcher: runs one compile under ccache so that hits survive a new clone.
# Usage (set by CMakeLists.txt): ccache_launch.sh CCACHE BASE_DIR COMPILER ARGS...
#
# Why more than plain ccache: every object that uses the precompiled header is keyed on the
# header's bytes, and GCC's .gch differs from build to build (it holds addresses), so a clone that
# builds its own .gch used to miss on every object (6 hits in 302 seen). Here, after the .gch is
# built, a .gch.sum beside it records what the .gch was made from: the compile's arguments (the
# clone's folder taken out) and the bytes of every header its depfile lists. ccache keys the
# objects on that sum instead (pch_external_checksum), which is the same in every clone of the
# same sources. A stale .gch (and its sum) is removed first: GCC would otherwise read the old
# header into the new one, and ccache would key the new one on the old.
set -eu
ccache=$1
base_dir=$2
shift 2

export CCACHE_BASEDIR="$base_dir"
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_PCH_EXTSUM=true

output=
depfile=
previous=
for arg in "$@"; do
  case $previous in
    -o) output=$arg ;;
    -MF) depfile=$arg ;;
  esac
  previous=$arg
done

case $output in
  *.gch) ;;
  *) exec "$ccache" "$@" ;;
esac

rm -f "$output" "$output.sum"
"$ccache" "$@"
# Anything short of every header hashed leaves no sum: ccache then hashes the .gch itself, slower
# across clones but never stale. (dash has no pipefail, so each step is checked by its output.)
[ -n "$depfile" ] && [ -f "$depfile" ] || exit 0
for tool in sha256sum xargs awk sort; do command -v "$tool" >/dev/null 2>&1 || exit 0; done
export LC_ALL=C
work=$(mktemp -d) || exit 0
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
# The depfile: "TARGET: DEP DEP \" lines; every word after the first colon is a header read.
sed -e 's/\\$//' -e '1s/^[^:]*://' "$depfile" | tr ' ' '\n' | sed '/^$/d' | sort -u >"$work/headers"
# The clone's folder taken out, literally (awk's index, not a pattern): BASE/ becomes ./, and BASE
# ending a line (-IBASE) becomes .
relative() {
  awk -v base="$base_dir" '{
    while ((i = index($0, base "/")) > 0) $0 = substr($0, 1, i - 1) "./" substr($0, i + length(base) + 1)
    n = length($0) - length(base)
    if (n >= 0 && substr($0, n + 1) == base) $0 = substr($0, 1, n) "."
    print
  }'
}
# Hashed in batches (thousands of headers); the few that name the clone's folder (CMake's
# cmake_pch.hxx) one by one, without it.
xargs -d '\n' grep -L -F -e "$base_dir/" -- <"$work/headers" >"$work/plain" 2>/dev/null || true
xargs -d '\n' grep -l -F -e "$base_dir/" -- <"$work/headers" >"$work/named" 2>/dev/null || true
{
  [ -s "$work/plain" ] && xargs -d '\n' sha256sum -- <"$work/plain" | cut -d' ' -f1
  while IFS= read -r header; do relative <"$header" | sha256sum | cut -d' ' -f1; done <"$work/named"
} >"$work/each" 2>/dev/null || true
# Every header hashed once, or no sum at all (a path the split above broke, a tool that differs).
[ "$(grep -c -x '[0-9a-f]\{64\}' "$work/each")" = "$(wc -l <"$work/headers")" ] || exit 0
{
  printf '%s\n' "$@" | relative
  sort -u "$work/each"
} | sha256sum | cut -d' ' -f1 >"$work/sum"
grep -q -x '[0-9a-f]\{64\}' "$work/sum" && mv "$work/sum" "$output.sum"
