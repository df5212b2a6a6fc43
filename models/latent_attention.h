// DeepSeek's multi-head latent attention (MLA, DeepSeek-V2 and V3): the projections that make
// each head's query, key and value, split over tp by heads as the dense attention is.
//
//   queries: x -> q_a (H -> q_lora_rank) -> RMSNorm -> q_b (-> heads x (nope + rope)),
//            or x -> q (-> heads x (nope + rope)) without a query latent;
//   keys and values: x -> kv_a (H -> kv_lora_rank + rope); the latent part -> RMSNorm -> kv_b
//            (-> heads x (nope + v)); the rope part is the rotated key of every head.
//
// q_b, q and kv_b are column-parallel (their rows are head by head, so each rank holds whole
// heads); the down projections q_a and kv_a and the latents' norms are replicated over tp,
// each rank sending back through them the gradient of its own heads only, so their gradients
// are summed over tp. The attention core sees ordinary heads: queries and keys of nope + rope
// features and values zero-padded to that width (models/self_attention.h cuts the context back).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "models/gpt_options.h"
#include "models/language_model.h"
#include "models/norm.h"
#include "parallel/parallel_module.h"
#include "parallel/tensor_parallel.h"

namespace loom::models {

// A weight [OUT, IN] every tp rank holds whole, drawn like any parameter of its name, its gradient
// summed over tp (each rank's is the part its heads sent back).
class ReplicatedLinearImpl : public parallel::ParallelModule {
 public:
  // SUMMED: tp > 1 (its gradient a sum of the ranks' parts).
  ReplicatedLinearImpl(const std::string& name, int64_t in, int64_t out, uint64_t seed, bool summed);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
};
TORCH_MODULE(ReplicatedLinear);

class LatentAttentionProjectionImpl : public parallel::ParallelModule {
 public:
  // PREFIX: the attention's global name prefix ("h.3.attn.").
  LatentAttentionProjectionImpl(const GPTOptions& options, const std::string& prefix, TensorParallelContext tp);

  struct Heads {
    torch::Tensor q, k, v;  // [B, S, heads, nope + rope] each, v zero-padded from v_head_dim
  };
  // ENTERED: the block's input already in the tp region ([B, S, H]); ROTATE turns [B, S, n, rope] by
  // each token's position.
  Heads forward(const torch::Tensor& entered, const std::function<torch::Tensor(const torch::Tensor&)>& rotate);

 private:
  MlaConfig mla_;
  int64_t heads_;
  ReplicatedLinear q_a_{nullptr}, kv_a_{nullptr};
  Norm q_a_norm_{nullptr}, kv_a_norm_{nullptr};
  parallel::ColumnParallelLinear q_{nullptr}, q_b_{nullptr}, kv_b_{nullptr};
};
TORCH_MODULE(LatentAttentionProjection);

}  // namespace loom::models
