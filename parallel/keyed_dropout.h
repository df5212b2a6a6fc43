// Dropout masks that are a function of each element's place in the whole model
// and batch (its global coordinate) and of a key drawn once per dropout site,
// instead of a stream of draws over a rank's local tensor. Under context
// parallelism a token's mask then does not depend on which cp rank holds it
// or on how many there are: cp 2 and cp 4 (with or without tp and sequence
// parallelism) drop the same elements. Keys come from the default generator,
// which every tp and cp rank seeds alike, so checkpoints and recomputation,
// which save and restore it, restore the masks too.
//
// The mask: a 32-bit integer hash of (key, coordinate) kept when it is at
// least p * 2^32, the survivors scaled by 1 / (1 - p).
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <cstdint>

namespace loom::parallel {

// One dropout site's key, from GENERATOR (null: the default generator).
int64_t draw_dropout_key(at::Generator* generator = nullptr);

// Whether each int64 COORDINATE is kept (bool, the coordinates' shape).
torch::Tensor keyed_keep(const torch::Tensor& coordinates, double p, int64_t key);
// The keep-and-scale factor (0 or 1 / (1 - P)) of each COORDINATE, in DTYPE (fp32 or wider: in
// bf16 1 / (1 - p) itself would round).
torch::Tensor keyed_keep_scale(const torch::Tensor& coordinates, double p, int64_t key, torch::ScalarType dtype);
// X * keep / (1 - P), as parallel::dropout scales, with COORDINATES broadcastable to X.
torch::Tensor keyed_dropout(const torch::Tensor& x, double p, int64_t key, const torch::Tensor& coordinates);

// Attention-probability dropout over a sequence split by context parallelism.
struct AttentionDropout {
  double p = 0;  // 0: none
  int64_t key = 0;
  int64_t first_head = 0;   // the global index of this rank's first query head
  int64_t total_heads = 1;  // the model's query heads
  int64_t seq_len = 1;      // the whole sequence
  bool active() const { return p > 0; }
};

// [B, heads, Lq, Lk] global coordinates of the probabilities of query heads first_head .. + HEADS
// at Q_POSITIONS [Lq] against keys at K_POSITIONS [Lk] (global int64 positions).
torch::Tensor attention_coordinates(const AttentionDropout& dropout, int64_t batch, int64_t heads,
                                    const torch::Tensor& q_positions, const torch::Tensor& k_positions);
// Their keep-and-scale factors in DTYPE (fp32 or wider).
torch::Tensor attention_keep_scale(const AttentionDropout& dropout, int64_t batch, int64_t heads,
                                   const torch::Tensor& q_positions, const torch::Tensor& k_positions,
                                   torch::ScalarType dtype);

}  // namespace loom::parallel
