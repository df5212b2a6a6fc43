#!/usr/bin/env bash
# Installs what is missing, then configures and builds loom in Release into build/.
#   bash scripts/setup.sh           what training needs: Debian's build tools and libraries, and
#                                   the pinned torch wheel (LibTorch 2.11 with CUDA 13 and NCCL,
#                                   torchrun) in the project's virtual environment .venv/; builds `loom`
#   bash scripts/setup.sh --tests   also what only the tests need (Catch2, SLURM, clang-format, the
#                                   Python references: transformers, tokenizers, tiktoken, sentencepiece,
#                                   tensorboard, matplotlib), and builds the test suite
# Safe to run again: it installs only what is absent (a lock already installed is not re-checked)
# and rebuilds what changed (ccache and precompiled headers keep it quick).
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
[ "${1:-}" = --tests ] && tests=1

packages=(
  cmake ninja-build ccache g++ pkg-config
  libgloo-dev                                   # the Gloo headers LibTorch's c10d Gloo header includes (the wheel ships none)
  libopenmpi-dev openmpi-bin                    # mpirun, and MPI for the rendezvous
  libyaml-cpp-dev nlohmann-json3-dev zlib1g-dev
  libcli11-dev                                  # the command line (CLI11 2.x, header-only)
  libsentencepiece-dev                          # SentencePiece tokenizers (*.model) for loom prepare
  libpcre2-dev libutf8proc-dev                  # Hugging Face BPE: pre-tokenizer regexes, NFC normalizer
  libzstd-dev                                   # loom prepare's *.zst inputs (*.gz through zlib)
  python3-venv                                  # Debian's python3 makes .venv only with it
)
if [ "$tests" = 1 ]; then
  packages+=(
    catch2 clang-format                         # the unit tests; CI's format check
    zstd                                        # prepare.sh compresses inputs with the zstd tool
    slurmctld slurmd slurm-client munge         # srun/sbatch: the slurm test starts a private one-node cluster
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Debian's LibTorch 1.13 beside the wheel's 2.11 gets its libraries mixed into the build
# (cmake/loom_torch.cmake refuses that); loom needs only the wheel's.
if dpkg-query -W -f='${Status}' libtorch-dev 2> /dev/null | grep -q "install ok installed"; then
  echo "setup: Debian's libtorch-dev (LibTorch 1.13) is installed; loom builds against the torch wheel in .venv/." >&2
  echo "setup: if the build mixes the two, remove it: apt-get remove libtorch-dev" >&2
fi

# The project's Python: the torch wheel (LibTorch inside) and, for the tests, the references,
# pinned with hashes (requirements/*.txt, written by requirements/lock.py).
python=${LOOM_BOOTSTRAP_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: making .venv with $($python --version 2>&1)"
  "$python" -m venv .venv
fi
install_lock() {  # install_lock NAME FILE...: pip installs the locks unless this exact set is in already
  local stamp=".venv/.loom-$1.lock"
  if ! cat "${@:2}" | cmp -s - "$stamp"; then
    local args=()
    for f in "${@:2}"; do args+=(-r "$f"); done
    echo "setup: installing $1 Python packages (${*:2})"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes "${args[@]}"
    cat "${@:2}" > "$stamp"
  fi
}
install_lock train requirements/train.txt
[ "$tests" = 1 ] && install_lock test requirements/train.txt requirements/test.txt

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
configure=()
[ -f build/CMakeCache.txt ] || configure=(-DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=OFF)
# The tests switch the suite on; a later plain setup leaves it on.
[ "$tests" = 1 ] && ! grep -q "^LOOM_BUILD_TESTS:BOOL=ON" build/CMakeCache.txt 2> /dev/null && configure+=(-DLOOM_BUILD_TESTS=ON)
if [ ${#configure[@]} -gt 0 ]; then
  cmake -S . -B build "${generator[@]}" "${configure[@]}"
fi
if [ "$tests" = 1 ]; then
  cmake --build build -j "${LOOM_BUILD_JOBS:-2}"
else
  cmake --build build -j "${LOOM_BUILD_JOBS:-2}" --target loom loom_sentencepiece
fi
