// A transformer block's causal self-attention, tensor parallel over tp: the
// query heads are split across the tp ranks (column-parallel projections),
// attention is local to each rank, and the output projection is row parallel.
//
// Multi-head attention (kv heads = heads) keeps GPT-2's fused QKV projection,
// its rows laid out head by head ([heads, 3, d]) so that the column split gives
// each rank whole heads. Grouped-query attention (fewer kv heads) has a query
// projection [heads, d] and a key/value projection [kv heads, 2, d], split by
// Megatron-LM's rule: with kv heads divisible by tp each rank holds whole kv
// heads; with tp divisible by kv heads every rank holds the whole (small) key/value
// weight and uses the rows of its kv head, and the gradient is summed over tp.
// Rotary embeddings (models/rotary.h) turn the queries and keys by each token's
// global position. Each query head then attends with its group's key and value.
// DeepSeek's multi-head latent attention makes its heads with models/latent_attention.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "models/gpt_options.h"
#include "models/kv_cache.h"
#include "models/language_model.h"
#include "models/latent_attention.h"
#include "models/norm.h"
#include "models/rotary.h"
#include "parallel/parallel_module.h"
#include "parallel/recompute.h"
#include "parallel/tensor_parallel.h"

namespace loom::models {

// GQA's key/value projection when tp exceeds the kv heads: the whole weight
// [kv_heads * 2 * d, H] on every tp rank, described as summed over tp (the rows
// another rank used get their gradient there, this rank's are zero).
class SharedKVProjectionImpl : public parallel::ParallelModule {
 public:
  SharedKVProjectionImpl(const std::string& name, const GPTOptions& options, parallel::Communicator& tp);
  // An input already entered into the tp region -> [B, S, 2 d]: this rank's kv head's keys and values.
  torch::Tensor forward_entered(const torch::Tensor& entered);

  torch::Tensor weight, bias;

 private:
  int64_t kv_head_, rows_;  // the kv head this rank uses and its rows (2 d)
};
TORCH_MODULE(SharedKVProjection);

// The rotary tables a model with OPTIONS uses: head_dim by seq_len positions.
RotaryEmbedding rotary_embedding_of(const GPTOptions& options);

class SelfAttentionImpl : public parallel::ParallelModule {
 public:
  // ROTARY: the model's rotary tables, shared by its layers; undefined: built here under rope.
  SelfAttentionImpl(const GPTOptions& options, int64_t layer, TensorParallelContext tp, RotaryEmbedding rotary = {});
  // x [B, S, H] ([B, S / tp, H] under sequence parallelism) -> the same shape.
  torch::Tensor forward(const torch::Tensor& x);

  // Incremental decoding (no dropout, no sequence parallelism): x [B, S, H] holds the S
  // positions that follow the LAYER's CACHE; their keys and values join the cache, and
  // each query attends to the cached positions and the new ones up to itself.
  torch::Tensor forward_cached(const torch::Tensor& x, KVCache& cache, int64_t layer);

  // The query heads this rank holds and the kv heads they read.
  int64_t local_heads() const { return heads_; }
  int64_t local_kv_heads() const { return kv_heads_; }

 private:
  struct Heads {
    torch::Tensor q, k, v;  // [B, S, heads, d], [B, S, kv heads, d] twice
  };
  // x -> this rank's query, key and value heads, rotated under rope for tokens at
  // FIRST_POSITION, FIRST_POSITION + 1, ... (under context parallelism: at this rank's two chunks).
  Heads project(const torch::Tensor& x, int64_t first_position);
  // q [B, heads, S, d], k and v [B, kv heads, S, d] (query heads of a kv group consecutive)
  // -> the causal attention's context [B, S, heads * d].
  torch::Tensor core(torch::Tensor q, torch::Tensor k, torch::Tensor v);
  // Context parallelism: q, k and v of this rank's part of the sequence, flattened side by side
  // ([B, S, (heads + 2 kv heads) d], only the kv heads travel) -> the context [B, S, heads d].
  torch::Tensor context_parallel_core(const torch::Tensor& packed);
  at::Generator* split_generator() const;
  // The context [B, S, heads d] -> [B, S, heads value_dim]: latent attention's padded values cut off.
  torch::Tensor cut_values(const torch::Tensor& context) const;

  GPTOptions options_;
  TensorParallelContext tp_;
  int64_t heads_, kv_heads_, d_;
  int64_t value_dim_;                          // d, or latent attention's v_head_dim
  double scale_;                               // the softmax's: 1 / sqrt(d), times YaRN's factor under latent attention
  LatentAttentionProjection latent_{nullptr};  // DeepSeek's multi-head latent attention (model.mla)
  parallel::ColumnParallelLinear qkv_{nullptr};  // multi-head attention
  parallel::ColumnParallelLinear q_{nullptr}, kv_{nullptr};
  SharedKVProjection shared_kv_{nullptr};   // instead of kv_ when tp exceeds the kv heads
  Norm q_norm_{nullptr}, k_norm_{nullptr};  // Qwen3's qk norm (model.qk_norm)
  parallel::RowParallelLinear proj_{nullptr};
  RotaryEmbedding rotary_;          // undefined with learned positions
  torch::Tensor causal_mask_;       // [S, S], true above the diagonal
  parallel::RecomputedFn core_fn_;  // what a selectively recomputing backward re-runs
  parallel::RecomputedFn context_parallel_core_fn_;
};
TORCH_MODULE(SelfAttention);

}  // namespace loom::models
