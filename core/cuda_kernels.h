// loom's own CUDA kernels, for the places where composing ATen's kernels costs a GPU step most
// of its memory traffic outside the matrix products (docs/performance.md): the cross-entropy
// over a large vocabulary, SwiGLU's gate, the rotary embedding and the MoE combine (one pass over
// their tensors forward and one back, computing in fp32 whatever the storage type), and the
// mixed-precision gradient's accumulation into its fp32 master.
//
// The functions take raw device pointers and a CUDA stream (cudaStream_t as void*), so this
// header and the .cu files under core/cuda_kernels/ include no LibTorch header: the torch-level
// wrappers are parallel/fused_cross_entropy.cpp, parallel/master_weights.cpp,
// parallel/weighted_combine.cpp, models/swiglu.cpp and models/rotary.cpp. Built where nvcc is (CMakeLists.txt:
// LOOM_CUDA_KERNELS); cuda_kernels_built() says whether this binary has them.
#pragma once

#include <cstdint>

namespace loom::cuda {

// The storage type of a kernel's floating-point tensors (all of one call's tensors share it).
enum class Storage { f32, f16, bf16 };

// Whether this build compiled the kernels below (false: calling them throws).
bool cuda_kernels_built();

// Whether the kernels run on GPU DEVICE: compiled for compute capability 8.0 and up (sm_80 and
// sm_90 code, and PTX the driver compiles for newer ones), so not on an older GPU (a T4, a V100),
// which keeps LibTorch's kernels. Asked once per device.
bool cuda_kernels_run_on(int64_t device);

// Cross-entropy per row of LOGITS [rows, vocab] (contiguous) against TARGETS [rows] (int64):
// LOSS[r] = logsumexp(logits[r]) - logits[r, t], in fp32, and LSE[r] the logsumexp (fp32),
// kept for backward. A target of -100 (PyTorch's ignore_index) gives loss 0; any other target
// outside [0, vocab) gives NaN, so that a bad token id cannot train silently.
void cross_entropy_forward(const void* logits, Storage storage, const int64_t* targets, int64_t rows, int64_t vocab,
                           float* loss, float* lse, void* stream);

// GRAD_LOGITS[r, j] = (exp(logits[r, j] - lse[r]) - [j == t]) * grad_loss[r], rounded once to
// the storage type; rows whose target is -100 get zeros.
void cross_entropy_backward(const void* logits, Storage storage, const int64_t* targets, const float* lse,
                            const float* grad_loss, int64_t rows, int64_t vocab, void* grad_logits, void* stream);

// OUT = silu(GATE) * UP over N elements. Rounded as the CPU's SwiGLU (models/swiglu.cpp) rounds:
// silu(gate) to the storage type, then the product, so that a GPU run and a CPU run round alike.
void swiglu_forward(const void* gate, const void* up, int64_t n, Storage storage, void* out, void* stream);

// GRAD_UP = round(silu(gate)) * dy and GRAD_GATE = silu'(gate) * round(dy * up), each product
// rounded to the storage type where the CPU's rounds.
void swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n, Storage storage,
                     void* grad_gate, void* grad_up, void* stream);

// DST[i] += SRC[i] over N elements, DST fp32 and SRC of STORAGE: the fp32 addition LibTorch's
// add_ does, bit for bit, in one vectorised pass.
void accumulate_fp32(float* dst, const void* src, int64_t n, Storage storage, void* stream);

// X's layout for rotary(): [batch, seq, heads, head_dim], the last dimension contiguous, the
// others at these strides (in elements).
struct RotaryShape {
  int64_t batch, seq, heads, head_dim;
  int64_t batch_stride, seq_stride, head_stride;
};

// The rotate-half rotary embedding of X (or, BACKWARD, its gradient's rotation back) into OUT,
// contiguous [batch, seq, heads, head_dim]; COS and SIN hold one contiguous row of head_dim per
// position of seq, of X's storage type. Rounded where models/rotary.cpp's composition rounds.
void rotary(const void* x, const RotaryShape& shape, const void* cos, const void* sin, Storage storage, bool backward,
            void* out, void* stream);

// The MoE combine with every choice kept: OUT[t, :] (contiguous [TOKENS, WIDTH]) = the sum over
// j < K of ROWS[ROW_OF_CHOICE[t K + j], :] * WEIGHTS[t K + j], each product rounded to the
// storage type, the sum in fp32 rounded once (as the composition [T, K, H] * [T, K, 1], sum(1)).
// ROWS is contiguous [TOKENS K, WIDTH] and ROW_OF_CHOICE a permutation of its rows.
void combine_forward(const void* rows, const int64_t* row_of_choice, const void* weights, int64_t tokens, int64_t k,
                     int64_t width, Storage storage, void* out, void* stream);

// Its backward: GRAD_ROWS[ROW_OF_CHOICE[t K + j], :] = GRAD_OUT[t, :] * WEIGHTS[t K + j], rounded,
// and GRAD_WEIGHTS[t K + j] = the fp32 sum over the row of GRAD_OUT[t, :] * ROWS[that row, :],
// each product rounded to the storage type first; the sum rounded once to it.
void combine_backward(const void* rows, const int64_t* row_of_choice, const void* weights, const void* grad_out,
                      int64_t tokens, int64_t k, int64_t width, Storage storage, void* grad_rows, void* grad_weights,
                      void* stream);

}  // namespace loom::cuda
