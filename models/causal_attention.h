// Causal self-attention computed head by head on CPU.
//
// The same function as softmax(mask(q k^T / sqrt(d))) v over the fused QKV
// projection's output, but one (sample, head) at a time: a head's S x S
// scores stay in cache through the scaling, the mask and the softmax (one
// pass instead of four over [B, heads, S, S]), q, k and v are read where the
// projection put them and the context is written where the output
// projection reads it (no permuted copies), and the heads are spread over
// the BLAS threads (core/blas_threads.h), each head's small products on one
// core. Backward works the same way and writes the QKV gradient in place.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace loom::models {

// qkv [B, S, heads * 3 * d], each head's q, k, v side by side (the column-parallel
// QKV layer's layout) -> context [B, S, heads * d]. No dropout on the probabilities.
torch::Tensor causal_attention(const torch::Tensor& qkv, int64_t heads);

}  // namespace loom::models
