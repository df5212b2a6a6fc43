#include "core/cuda_backend.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

// Builds that link the CUDA runtime: with NCCL, or the runtime alone (CMakeLists.txt). The one
// file that calls it.
#if defined(LOOM_WITH_NCCL) || defined(LOOM_WITH_CUDA_RUNTIME)
#define LOOM_HAS_CUDA_RUNTIME
#include <cuda_runtime.h>
#endif

namespace loom {

int64_t cuda_runtime_device_count() {
#ifdef LOOM_HAS_CUDA_RUNTIME
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear it so that CUDA does not report it later
    return 0;
  }
  return count;
#else
  return -1;
#endif
}

std::string cuda_runtime_version() {
#ifdef LOOM_HAS_CUDA_RUNTIME
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
#else
  return "";
#endif
}

std::string cuda_runtime_gpu_name(int64_t index) {
#ifdef LOOM_HAS_CUDA_RUNTIME
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, static_cast<int>(index)) == cudaSuccess) return properties.name;
  cudaGetLastError();  // clear the error, which CUDA would otherwise report again later
#endif
  return "";
}

int64_t cuda_runtime_total_memory(int64_t index) {
#ifdef LOOM_HAS_CUDA_RUNTIME
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, static_cast<int>(index)) == cudaSuccess) {
    return static_cast<int64_t>(properties.totalGlobalMem);
  }
  cudaGetLastError();
#endif
  return -1;
}

void cuda_runtime_set_device(int64_t index) {
#ifdef LOOM_HAS_CUDA_RUNTIME
  const cudaError_t status = cudaSetDevice(static_cast<int>(index));
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("cudaSetDevice(") + std::to_string(index) +
                             ") failed: " + cudaGetErrorString(status));
  }
#endif
}

std::string torch_cuda_library() {
#ifdef LOOM_TORCH_CUDA_LIBRARY
  return LOOM_TORCH_CUDA_LIBRARY;
#else
  return "";
#endif
}

std::string load_torch_cuda() {
#ifdef LOOM_TORCH_CUDA_LIBRARY
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    // By name first: the executable's run path (LibTorch's lib/ in a build tree or an install),
    // then LD_LIBRARY_PATH; the path of the LibTorch loom was built against last.
    // RTLD_GLOBAL: libraries loaded later (and LibTorch's own lookups) see its symbols.
    for (const char* name : {"libtorch_cuda.so", LOOM_TORCH_CUDA_LIBRARY}) {
      if (dlopen(name, RTLD_NOW | RTLD_GLOBAL) != nullptr) {
        failure.clear();
        return;
      }
      const char* error = dlerror();
      failure = error != nullptr ? error : "dlopen failed";
    }
  });
  return failure;
#else
  return "this loom was built against a LibTorch without CUDA";
#endif
}

}  // namespace loom
