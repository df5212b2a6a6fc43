# Sourced on the GPU machine, from the repository root: the loader finds the carried
# binary's Debian libraries (.gpu_carry/lib) and LibTorch, CUDA and NCCL in the GPU
# machine's own torch wheel (python3's), ahead of the build machine's paths in the binary's
# RUNPATH, which do not exist there. LOOM is the binary the scripts run.
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
wheel_libs="$site/torch/lib"
for dir in "$site"/nvidia/*/lib "$site"/nvidia/cu13/lib; do
  [ -d "$dir" ] && wheel_libs="$wheel_libs:$dir"
done
export LD_LIBRARY_PATH="$PWD/.gpu_carry/lib:$PWD/.gpu_carry:$wheel_libs:${LD_LIBRARY_PATH:-}"
export LOOM="$PWD/.gpu_carry/loom"
