#!/usr/bin/env bash
# Run on the GPU machine, from the repository root: builds loom against the
# LibTorch inside its PyTorch wheel (CUDA), with the .debs that
# bench/gpu/fetch_deps.sh downloaded (carried in .gpu_deps/) unpacked under
# /tmp/loom_deps. No MPI there (jobs start with torchrun or as one process);
# Gloo only when the wheel ships its headers. Prints where loom is.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=/tmp/loom_deps
mkdir -p "$deps"
for deb in .gpu_deps/*.deb; do dpkg -x "$deb" "$deps"; done
# Absolute links in the packages (libz.so) point into /: make them point into the unpacked tree.
find "$deps" -type l -lname '/*' | while read -r link; do
  target=$(readlink "$link")
  case "$target" in "$deps"/*) ;; *) ln -sfn "$deps$target" "$link" ;; esac
done
arch_lib="$deps/usr/lib/x86_64-linux-gnu"
# The tokenizers' libraries (SentencePiece, PCRE2, utf8proc) are found by the carried pkgconf,
# reading the carried .pc files with the unpacked tree as their root.
export PKG_CONFIG_LIBDIR="$arch_lib/pkgconfig:$deps/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$deps"
export LD_LIBRARY_PATH="$arch_lib:${LD_LIBRARY_PATH:-}"
pkg_config=${PKG_CONFIG:-$deps/usr/bin/pkgconf}
# TORCH_PREFIX, LOOM_GLOO (ON/OFF) and BUILD_DIR override what is found (a dry run on the CPU machine uses them).
torch_prefix=${TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
torch_include=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))' 2>/dev/null || true)
build_dir=${BUILD_DIR:-build-gpu}
# NCCL from the wheel's nvidia packages: nvidia/nccl (cu12) or wherever nccl.h lies under nvidia/ (cu13).
nccl_root=$(python3 - 2>/dev/null << 'PY' || true
import glob, os, nvidia
for base in nvidia.__path__:
    for header in sorted(glob.glob(os.path.join(base, "**", "include", "nccl.h"), recursive=True)):
        print(os.path.dirname(os.path.dirname(header)))
        raise SystemExit
PY
)
gloo=OFF
[ -n "$torch_include" ] && [ -f "$torch_include/gloo/config.h" ] && gloo=ON
gloo=${LOOM_GLOO:-$gloo}
nccl_args=()
if [ -n "$nccl_root" ] && [ -f "$nccl_root/include/nccl.h" ]; then
  nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_root/include" -DNCCL_LIBRARY="$(ls "$nccl_root"/lib/libnccl.so* | head -1)")
fi
# Newer LibTorch headers refuse C++17 (#error ... C++20 ... required): follow them.
cxx_standard=${LOOM_CXX_STANDARD:-17}
if [ -z "${LOOM_CXX_STANDARD:-}" ] && [ -n "$torch_include" ] &&
   grep -rqs "C++20 or later compatible compiler is required" "$torch_include/c10/macros" "$torch_include/ATen" 2>/dev/null; then
  cxx_standard=20
fi
# The carried Debian 12 libraries need glibc 2.34 or newer.
echo "torch at $torch_prefix | C++$cxx_standard | gloo headers: $gloo | nccl: ${nccl_root:-not found} | $(g++ --version | head -1) | $(ldd --version | head -1)"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" \
  -Dyaml-cpp_DIR="$arch_lib/cmake/yaml-cpp" -Dspdlog_DIR="$arch_lib/cmake/spdlog" -Dfmt_DIR="$arch_lib/cmake/fmt" \
  -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json" -DZLIB_ROOT="$deps/usr" -DCLI11_DIR="$deps/usr/share/cmake/CLI11" \
  -DCMAKE_CXX_STANDARD="$cxx_standard" -DPKG_CONFIG_EXECUTABLE="$pkg_config" \
  -DLOOM_WITH_MPI=OFF -DLOOM_WITH_GLOO="$gloo" -DLOOM_BUILD_TESTS=OFF "${nccl_args[@]}"
# -k 0: every compile error of a first build on a new LibTorch in one log.
[ "${CONFIGURE_ONLY:-0}" = 1 ] && exit 0
cmake --build "$build_dir" -j "$(nproc)" --target loom -- -k 0
echo "export LD_LIBRARY_PATH=$arch_lib:\${LD_LIBRARY_PATH:-}"
