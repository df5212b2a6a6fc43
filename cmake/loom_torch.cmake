# LibTorch from the PyPI torch wheel in the project's virtual environment (.venv/, made by
# scripts/setup.sh), or from wherever Torch_DIR / CMAKE_PREFIX_PATH / LOOM_PYTHON point.
#
# Sets, besides what find_package(Torch) sets:
#   LOOM_TORCH_SITE        the wheel's site-packages (torch/ and nvidia/ inside), if found through Python
#   LOOM_WHEEL_NCCL_ROOT   the wheel's NCCL (nvidia/nccl: include/, lib/): the one libtorch_cuda loads
set(LOOM_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "the Python whose torch package holds the LibTorch loom builds against")

set(LOOM_TORCH_SITE "")
if(NOT Torch_DIR AND EXISTS "${LOOM_PYTHON}")
  execute_process(
    COMMAND "${LOOM_PYTHON}" -c "import os, torch; print(torch.utils.cmake_prefix_path); print(os.path.dirname(os.path.dirname(torch.__file__)))"
    OUTPUT_VARIABLE _loom_torch_paths RESULT_VARIABLE _loom_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_loom_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" _loom_torch_paths "${_loom_torch_paths}")
    list(GET _loom_torch_paths 0 _loom_torch_prefix)
    list(GET _loom_torch_paths 1 LOOM_TORCH_SITE)
    list(PREPEND CMAKE_PREFIX_PATH "${_loom_torch_prefix}")
  endif()
endif()

# The wheel's Caffe2 config probes the local GPU for its architecture unless told which to
# build for; there is no GPU here, and loom compiles no CUDA kernels of its own (LibTorch's
# are in the wheel), so the list only has to be valid: H100 and H200 are 9.0.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()

find_package(Torch REQUIRED)

# Only one LibTorch may be linked: a second one on the machine (Debian's libtorch-dev, 1.13)
# has been seen to be picked up by the wheel's TorchConfig next to 2.x headers.
if(Torch_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "loom needs LibTorch 2.4 or newer; found ${Torch_VERSION} at ${Torch_DIR} "
                      "(run scripts/setup.sh, which installs the pinned torch wheel into .venv/)")
endif()
get_filename_component(_loom_torch_root "${Torch_DIR}/../../.." ABSOLUTE)
foreach(_lib IN LISTS TORCH_LIBRARIES)
  if(_lib MATCHES "^/" AND NOT _lib MATCHES "^${_loom_torch_root}/" AND _lib MATCHES "libtorch|libc10")
    message(FATAL_ERROR "LibTorch library ${_lib} is not from ${_loom_torch_root}: two LibTorch installations "
                        "are mixed (remove the other one, e.g. Debian's libtorch-dev)")
  endif()
endforeach()

if(NOT LOOM_TORCH_SITE)
  get_filename_component(LOOM_TORCH_SITE "${_loom_torch_root}/.." ABSOLUTE)
endif()
set(LOOM_WHEEL_NCCL_ROOT "")
if(EXISTS "${LOOM_TORCH_SITE}/nvidia/nccl/include/nccl.h")
  set(LOOM_WHEEL_NCCL_ROOT "${LOOM_TORCH_SITE}/nvidia/nccl")
endif()
message(STATUS "loom: LibTorch ${Torch_VERSION} from ${_loom_torch_root}")
