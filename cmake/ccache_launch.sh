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
if [ -n "$depfile" ] && [ -f "$depfile" ]; then
  # The depfile: "TARGET: DEP DEP \" lines; every word after the first colon is a header read.
  # Each header counts by its bytes alone (the clone's folder taken out of the few that name it,
  # such as CMake's cmake_pch.hxx), once per distinct content: GCC's #pragma once takes two equal
  # files with equal times for one, so a second copy is listed in one clone and not in another.
  headers=$(mktemp)
  trap 'rm -f "$headers"' EXIT
  sed -e 's/\\$//' -e '1s/^[^:]*://' "$depfile" | tr ' ' '\n' | sed '/^$/d' | sort -u >"$headers"
  {
    printf '%s\n' "$@" | sed -e "s#$base_dir/#./#g" -e "s#$base_dir\$#.#"
    {
      xargs -d '\n' -r grep -L -F -e "$base_dir/" -- <"$headers" | xargs -d '\n' -r sha256sum -- | cut -d' ' -f1
      xargs -d '\n' -r grep -l -F -e "$base_dir/" -- <"$headers" | while IFS= read -r header; do
        sed "s#$base_dir/#./#g" "$header" | sha256sum | cut -d' ' -f1
      done
    } | sort -u
  } | sha256sum | cut -d' ' -f1 >"$output.sum"
fi
