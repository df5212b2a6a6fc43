#!/usr/bin/env bash
# Run on the CPU machine (it reaches Debian's packages): downloads the .debs
# that loom's GPU build needs beside LibTorch (pkgconf to find the tokenizers' libraries) into .gpu_deps/ (ignored by git),
# for the device tool to carry. The GPU machine has CUDA, CMake, ninja and
# PyTorch, but no package registry.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu_deps
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu_deps/' "$exclude" 2>/dev/null || echo '/.gpu_deps/' >> "$exclude"
cd .gpu_deps
packages=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev zlib1g-dev zlib1g libcli11-dev
  libsentencepiece-dev libsentencepiece0 libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libzstd-dev libzstd1 pkgconf-bin libpkgconf3)
apt-get download "${packages[@]}" > /dev/null
for p in "${packages[@]}"; do
  ls "${p}"_*.deb > /dev/null 2>&1 || { echo "fetch_deps: $p was not downloaded" >&2; exit 1; }
done
ls -1 *.deb
du -sh .
