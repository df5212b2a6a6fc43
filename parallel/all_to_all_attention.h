// Causal attention over a sequence split across the context-parallel (cp)
// group by all-to-all, as DeepSpeed-Ulysses does: q, k and v are re-split
// from this rank's part of the sequence (load-balanced chunks r and 2cp-1-r,
// parallel/ring_attention.h) to 1/cp of the heads over the whole sequence,
// each rank attends on its heads, and the context is re-split back. Three
// all-to-alls of activations in and one out per call forward, as many backward.
// Heads and kv heads on each tp rank must be divisible by cp.
#pragma once

#include <torch/torch.h>

#include "parallel/communicator.h"
#include "parallel/keyed_dropout.h"

namespace loom::parallel {

// q [B, heads, 2c, d], k and v [B, kv_heads, 2c, d] (this rank's two chunks) -> context [B, heads, 2c, d].
torch::Tensor all_to_all_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   Communicator& cp, double scale, const AttentionDropout& dropout = {});

}  // namespace loom::parallel
