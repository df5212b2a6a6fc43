#include "models/latent_attention.h"

#include "core/precision.h"
#include "parallel/init.h"
#include "parallel/weight_grad_store.h"

namespace loom::models {

ReplicatedLinearImpl::ReplicatedLinearImpl(const std::string& name, int64_t in, int64_t out, uint64_t seed,
                                           bool summed) {
  weight = register_parallel_parameter("weight", parallel::init_normal(seed, name + ".weight", {out, in}, kInitStd),
                                       {name + ".weight", {}, -1, summed});
}

torch::Tensor ReplicatedLinearImpl::forward(const torch::Tensor& x) {
  return parallel::linear_deferring_weight_grad(x, cast_to_activation(weight, x), {});
}

// The latents' norms keep DeepSeek's release's epsilon (1e-6), whatever model.norm_eps says.
constexpr double kLatentNormEps = 1e-6;

LatentAttentionProjectionImpl::LatentAttentionProjectionImpl(const GPTOptions& options, const std::string& p,
                                                             TensorParallelContext tp)
    : mla_(options.mla), heads_(options.num_heads / tp.tp->size()) {
  const int64_t h = options.hidden_size, qk = mla_.qk_head_dim();
  auto column = [&](const std::string& name, int64_t in, int64_t out) {
    return parallel::ColumnParallelLinear(
        parallel::ColumnParallelLinearOptions(in, out).name(p + name).seed(options.seed).bias(false), *tp.tp);
  };
  const bool summed = tp.tp->size() > 1;
  // Registered in order of use: the parameters are collected in this order.
  if (mla_.q_lora_rank > 0) {
    q_a_ = register_module("q_a", ReplicatedLinear(p + "q_a", h, mla_.q_lora_rank, options.seed, summed));
    q_a_norm_ =
        register_module("q_a_norm", Norm(NormKind::rmsnorm, p + "q_a_norm", mla_.q_lora_rank, summed, kLatentNormEps));
    q_b_ = register_module("q_b", column("q_b", mla_.q_lora_rank, options.num_heads * qk));
  } else {
    q_ = register_module("q", column("q", h, options.num_heads * qk));
  }
  kv_a_ = register_module(
      "kv_a", ReplicatedLinear(p + "kv_a", h, mla_.kv_lora_rank + mla_.qk_rope_head_dim, options.seed, summed));
  kv_a_norm_ =
      register_module("kv_a_norm", Norm(NormKind::rmsnorm, p + "kv_a_norm", mla_.kv_lora_rank, summed, kLatentNormEps));
  kv_b_ = register_module(
      "kv_b", column("kv_b", mla_.kv_lora_rank, options.num_heads * (mla_.qk_nope_head_dim + mla_.v_head_dim)));
}

LatentAttentionProjectionImpl::Heads LatentAttentionProjectionImpl::forward(
    const torch::Tensor& x, const std::function<torch::Tensor(const torch::Tensor&)>& rotate) {
  const int64_t b = x.size(0), s = x.size(1), nope = mla_.qk_nope_head_dim, rope = mla_.qk_rope_head_dim,
                vd = mla_.v_head_dim, qk = nope + rope;
  auto q = (q_a_ ? q_b_->forward_entered(q_a_norm_->forward(q_a_->forward(x))) : q_->forward_entered(x))
               .view({b, s, heads_, qk});
  auto compressed = kv_a_->forward(x);  // [B, S, kv_lora_rank + rope]
  auto kv = kv_b_->forward_entered(kv_a_norm_->forward(compressed.narrow(-1, 0, mla_.kv_lora_rank)))
                .view({b, s, heads_, nope + vd});
  auto k_rope = rotate(compressed.narrow(-1, mla_.kv_lora_rank, rope).unsqueeze(2));  // [B, S, 1, rope]
  q = torch::cat({q.narrow(-1, 0, nope), rotate(q.narrow(-1, nope, rope))}, -1);
  auto k = torch::cat({kv.narrow(-1, 0, nope), k_rope.expand({b, s, heads_, rope})}, -1);
  // Values padded to the query's width: every attention kernel (the fused one, ring attention,
  // the all-to-all) then sees heads of one width; the padding's context is zero and cut off.
  auto v = kv.narrow(-1, nope, vd);
  if (vd != qk) v = torch::constant_pad_nd(v, {0, qk - vd});
  return {q, k, v};
}

}  // namespace loom::models
