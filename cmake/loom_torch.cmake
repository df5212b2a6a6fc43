# LibTorch from the PyPI torch wheel in the project's virtual environment (.venv/, made by
# scripts/setup.sh), or from wherever Torch_DIR / CMAKE_PREFIX_PATH / LOOM_PYTHON point.
#
# Sets, besides what find_package(Torch) sets:
#   LOOM_TORCH_SITE        the wheel's site-packages (torch/ and nvidia/ inside), if found through Python
#   LOOM_WHEEL_NCCL_ROOT   the wheel's NCCL (nvidia/nccl: include/, lib/): the one libtorch_cuda loads
#   LOOM_TORCH_CUDA_LIBRARY  libtorch_cuda.so, when this LibTorch has CUDA (loaded at run time)
#   loom_torch             the target to link: LibTorch's headers and flags, its CPU libraries only
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
# 2.5: scaled_dot_product_attention's enable_gqa (grouped-query attention in the fused kernel).
if(Torch_VERSION VERSION_LESS 2.5)
  message(FATAL_ERROR "loom needs LibTorch 2.5 or newer; found ${Torch_VERSION} at ${Torch_DIR} "
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

# loom links LibTorch's CPU half alone and loads libtorch_cuda.so when a rank takes a GPU
# (core/cuda_backend.h): linked in, its initialisers and libraries cost every process 0.33 s and
# 350 MB at start-up, GPU or not. loom calls nothing of it directly; the headers and compile flags
# stay those of the whole LibTorch (the `torch` target), so the build is the same.
add_library(loom_torch INTERFACE)
target_include_directories(loom_torch SYSTEM INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_definitions(loom_torch INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_COMPILE_DEFINITIONS>)
target_compile_options(loom_torch INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_COMPILE_OPTIONS>)
target_link_libraries(loom_torch INTERFACE torch_cpu c10)
set(LOOM_TORCH_CUDA_LIBRARY "")
if(TARGET torch_cuda)
  get_target_property(LOOM_TORCH_CUDA_LIBRARY torch_cuda IMPORTED_LOCATION)
  if(NOT LOOM_TORCH_CUDA_LIBRARY)
    get_target_property(LOOM_TORCH_CUDA_LIBRARY torch_cuda IMPORTED_LOCATION_RELEASE)
  endif()
endif()
message(STATUS "loom: LibTorch's CUDA library, loaded when a GPU is used: ${LOOM_TORCH_CUDA_LIBRARY}")
