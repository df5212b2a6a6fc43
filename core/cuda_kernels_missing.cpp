// The build without nvcc (CMakeLists.txt: LOOM_CUDA_KERNELS off): the callers ask
// cuda_kernels_built() first and take LibTorch's composed kernels instead.
#include <stdexcept>

#include "core/cuda_kernels.h"

namespace loom::cuda {
namespace {
[[noreturn]] void missing() {
  throw std::logic_error("loom was built without its CUDA kernels (no nvcc)");
}
}  // namespace

bool cuda_kernels_built() {
  return false;
}
bool cuda_kernels_run_on(int64_t) {
  return false;
}
void cross_entropy_forward(const void*, Storage, const int64_t*, int64_t, int64_t, float*, float*, void*) {
  missing();
}
void cross_entropy_backward(const void*, Storage, const int64_t*, const float*, const float*, int64_t, int64_t, void*,
                            void*) {
  missing();
}
void swiglu_forward(const void*, const void*, int64_t, Storage, void*, void*) {
  missing();
}
void swiglu_backward(const void*, const void*, const void*, int64_t, Storage, void*, void*, void*) {
  missing();
}
void accumulate_fp32(float*, const void*, int64_t, Storage, void*) {
  missing();
}
void rotary(const void*, const RotaryShape&, const void*, const void*, Storage, bool, void*, void*) {
  missing();
}
void combine_forward(const void*, const int64_t*, const void*, int64_t, int64_t, int64_t, Storage, void*, void*) {
  missing();
}
void combine_backward(const void*, const int64_t*, const void*, const void*, int64_t, int64_t, int64_t, Storage, void*,
                      void*, void*) {
  missing();
}

}  // namespace loom::cuda
