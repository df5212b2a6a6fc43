#!/usr/bin/env bash
# Run on the CPU machine after the README's build: puts the loom binary built here (LibTorch 2.11
# from the PyPI wheel, CUDA 13 and NCCL compiled in) and the Debian libraries it loads beside
# LibTorch into .gpu_carry/ (ignored by git), for the device tool to carry. The GPU machine has
# the same torch wheel in its own Python: bench/gpu/env.sh points the loader at it, so the binary
# tested here is the one that runs there, and no device time goes on a build.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu_carry/' "$exclude" 2> /dev/null || echo '/.gpu_carry/' >> "$exclude"
# The baseline first, out of the way: it may be an earlier .gpu_carry/loom.
baseline_copy=
if [ -n "${BASELINE:-}" ]; then
  baseline_copy=$(mktemp)
  cp "$BASELINE" "$baseline_copy"
fi
rm -rf .gpu_carry && mkdir -p .gpu_carry/lib
cp "$build/loom" .gpu_carry/
[ -f "$build/libloom_sentencepiece.so" ] && cp "$build/libloom_sentencepiece.so" .gpu_carry/
# The unit tests, for check.sh's CUDA kernel tests (tests/test_cuda_kernels.cpp) on the GPU. Without
# them check.sh's cuda_kernels case fails there: a build that has tests must have built them first.
if [ -x "$build/tests/loom_unit_tests" ]; then
  mkdir -p .gpu_carry/tests
  cp "$build/tests/loom_unit_tests" .gpu_carry/tests/
elif grep -q '^LOOM_BUILD_TESTS:BOOL=ON' "$build/CMakeCache.txt" 2> /dev/null; then
  echo "carry: $build/tests/loom_unit_tests is not built yet (check.sh needs it): build it, then carry" >&2
  exit 1
fi
# BASELINE=path/to/an/earlier/loom [BASELINE_COMMIT=sha]: carried beside it, for session.sh's
# BASELINE_CONFIGS (the same benchmark with both binaries on one GPU).
if [ -n "$baseline_copy" ]; then
  mv "$baseline_copy" .gpu_carry/loom_baseline
  chmod +x .gpu_carry/loom_baseline
  echo "${BASELINE_COMMIT:-unknown}" | tr -c 'A-Za-z0-9._\n-' _ > .gpu_carry/loom_baseline.commit
fi
# Every library the binaries load that is neither the C/C++ runtime (the GPU machine's own, newer)
# nor LibTorch's or NVIDIA's (the GPU machine's wheel).
for binary in .gpu_carry/loom .gpu_carry/loom_baseline .gpu_carry/libloom_sentencepiece.so .gpu_carry/tests/loom_unit_tests; do
  [ -f "$binary" ] || continue
  ldd "$binary" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | libdl.so* | libpthread.so* | librt.so* | libutil.so* | ld-linux*) continue ;;
  esac
  case "$path" in */site-packages/*) continue ;; esac
  cp -L "$path" ".gpu_carry/lib/$name"
done
# The newest glibc symbol version anything carried asks for (the GPU machine's glibc must have it).
newest=$(objdump -T .gpu_carry/loom .gpu_carry/*.so .gpu_carry/lib/* 2> /dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)
echo "carried: $(ls .gpu_carry/lib | tr '\n' ' ')"
echo "needs $newest; $(du -sh .gpu_carry | cut -f1) in .gpu_carry/"
# The device tool carries the working tree's tracked and untracked files too, 64 MiB in all.
tree=$( (git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2> /dev/null || true) | tail -1 | cut -f1)  # (a deleted file: du says nothing of it)
total=$((tree + $(du -sb .gpu_carry | cut -f1)))
echo "a call carries about $((total / 1048576)) MiB (the tree $((tree / 1048576)) MiB) of its 64"
if ((total > 64 * 1048576)); then
  echo "carry: $total bytes is more than a call carries (64 MiB): leave BASELINE out, or strip the binaries" >&2
  exit 1
fi
