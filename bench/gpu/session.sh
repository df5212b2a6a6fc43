#!/usr/bin/env bash
# One device-tool call's worth of GPU work, from the repository root on the GPU
# machine (carrying .gpu_deps from bench/gpu/fetch_deps.sh): the machine's
# versions, the build (skipped when build-gpu/loom is there), the single-GPU
# checks (bench/gpu/check.sh), then the benchmark (bench/gpu/run.sh, its
# arguments). Logs go to $OUT: build.log, check.log and run.sh's files.
# All three may not fit one call's 10 minutes; the plan for a first session:
#   1. SKIP_BENCH=1 bash bench/gpu/session.sh            (build and checks; loom comes back in $OUT)
#   2. copy loom and libloom_sentencepiece.so into .gpu_build/, carry it with .gpu_deps, then
#      SKIP_CHECK=1 bash bench/gpu/session.sh            (the GPT benchmark)
#   3. SKIP_CHECK=1 bash bench/gpu/session.sh --config bench/gpu/llama_1b.yaml
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/loom_gpu_bench}
mkdir -p "$out"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  echo "cores $(nproc) | $(g++ --version | head -1) | $(nvcc --version | tail -1)"
} 2>&1 | tee "$out/build.log"
# A binary brought back by an earlier call (its $OUT files copied into .gpu_build/, carried)
# spares the build when the sources have not changed since.
if [ ! -x build-gpu/loom ] && [ -x .gpu_build/loom ]; then
  mkdir -p build-gpu && cp .gpu_build/loom .gpu_build/libloom_sentencepiece.so build-gpu/
  echo "using the carried .gpu_build/loom"
fi
if [ ! -x build-gpu/loom ]; then
  start=$SECONDS
  if ! timeout "${BUILD_TIMEOUT:-400}" bash bench/gpu/build.sh >> "$out/build.log" 2>&1; then
    grep -E "error|Error|CMake Error" "$out/build.log" | head -80
    tail -20 "$out/build.log"
    exit 1
  fi
  echo "built in $((SECONDS - start)) s"
  cp build-gpu/loom build-gpu/libloom_sentencepiece.so "$out/"
fi
# Which CUDA runtime, LibTorch and NCCL the binary loads (two CUDA runtimes would show here).
LD_LIBRARY_PATH=/tmp/loom_deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-} ldd build-gpu/loom |
  grep -E "cudart|torch_cuda|nccl|not found" | tee -a "$out/build.log"
[ "${SKIP_CHECK:-0}" = 1 ] || timeout "${CHECK_TIMEOUT:-200}" bash bench/gpu/check.sh 2>&1 | tee "$out/check.log"
[ "${SKIP_BENCH:-0}" = 1 ] || timeout "${BENCH_TIMEOUT:-420}" bash bench/gpu/run.sh "$@"
