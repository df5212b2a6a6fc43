#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds loom
# in Release into build/. Safe to run again: it only installs what is absent
# and rebuilds what changed (ccache and precompiled headers keep it quick).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build ccache g++ clang-format
  libtorch-dev libgloo-dev python3-torch        # LibTorch 1.13 (CPU), its c10d Gloo headers, torchrun
  libopenblas0-pthread                          # LibTorch's BLAS: the reference one is ~14x slower
  libopenmpi-dev openmpi-bin                    # mpirun, and MPI for the rendezvous
  libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev catch2 zlib1g-dev
  libcli11-dev                                  # the command line (CLI11 2.x, header-only)
  libsentencepiece-dev                          # SentencePiece tokenizers (*.model) for loom prepare
  libpcre2-dev libutf8proc-dev                  # Hugging Face BPE: pre-tokenizer regexes, NFC normalizer
  python3-sentencepiece nodejs                  # the tokenizers test's references (Tokenizers.js runs on node)
  slurmctld slurmd slurm-client munge           # srun/sbatch: the slurm test starts a private one-node cluster
  python3-matplotlib                            # scripts/plot_metrics.py: a run's loss curves to a PNG
  python3-protobuf python3-crc32c               # the tensorboard test's outside readers of event files
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Some nodejs builds (NodeSource's) carry npm themselves, and conflict with Debian's npm package.
command -v npm > /dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The tokenizers test's JavaScript references (Tokenizers.js, js-tiktoken), pinned by
# tests/reference/package-lock.json; skipped when already installed at that lock.
if [ ! -f tests/reference/node_modules/.package-lock.json ] ||
  ! cmp -s tests/reference/package-lock.json tests/reference/node_modules/.loom-lock; then
  (cd tests/reference && npm ci --no-audit --no-fund && cp package-lock.json node_modules/.loom-lock)
fi

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j "${LOOM_BUILD_JOBS:-2}"
