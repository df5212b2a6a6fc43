#include "models/self_attention.h"

#include <torch/version.h>

#include <cmath>
#include <limits>

#include "core/precision.h"
#include "models/residual_projection.h"
#include "parallel/all_to_all_attention.h"
#include "parallel/init.h"
#include "parallel/ring_attention.h"
#include "parallel/tp_regions.h"
#include "parallel/weight_grad_store.h"

namespace loom::models {

SharedKVProjectionImpl::SharedKVProjectionImpl(const std::string& name, const GPTOptions& options,
                                               parallel::Communicator& tp) {
  const int64_t kv = options.kv_heads(), d = options.head_dim();
  TORCH_CHECK(tp.size() % kv == 0, name, ": ", kv, " kv heads cannot be shared by ", tp.size(), " tp ranks");
  rows_ = 2 * d;
  kv_head_ = tp.rank() / (tp.size() / kv);  // the ranks holding query heads of kv head k are consecutive
  // Drawn like a column-parallel layer of the same name, so every layout starts from the same weight.
  weight = register_parallel_parameter(
      "weight", parallel::init_normal(options.seed, name + ".weight", {kv * rows_, options.hidden_size}, kInitStd),
      {name + ".weight", {}, -1, /*summed over tp=*/true});
  if (options.qkv_bias) {
    bias = register_parallel_parameter("bias", torch::zeros({kv * rows_}), {name + ".bias", {}, -1, true});
  }
}

torch::Tensor SharedKVProjectionImpl::forward_entered(const torch::Tensor& x) {
  auto w = cast_to_activation(weight.narrow(0, kv_head_ * rows_, rows_), x);
  return parallel::linear_deferring_weight_grad(
      x, w, bias.defined() ? cast_to_activation(bias.narrow(0, kv_head_ * rows_, rows_), x) : bias);
}

RotaryEmbedding rotary_embedding_of(const GPTOptions& options) {
  return RotaryEmbedding(options.rotary_dim(), options.seq_len, options.rope_theta, options.rope_scaling,
                         options.rope_interleave);
}

SelfAttentionImpl::SelfAttentionImpl(const GPTOptions& options, int64_t layer, TensorParallelContext tp,
                                     RotaryEmbedding rotary)
    : options_(options), tp_(tp), rotary_(std::move(rotary)) {
  const int64_t h = options.hidden_size, t = tp.tp->size(), kv = options.kv_heads();
  d_ = options.head_dim();
  value_dim_ = options.mla.enabled() ? options.mla.v_head_dim : d_;
  scale_ = 1.0 / std::sqrt(static_cast<double>(d_));
  if (options.mla.enabled()) scale_ *= latent_softmax_scale_factor(options.rope_scaling);
  heads_ = options.num_heads / t;
  const bool shared = kv_heads_shared(kv, t);
  kv_heads_ = shared ? 1 : kv / t;
  const std::string p = "h." + std::to_string(layer) + ".attn.";
  const bool sp = tp.sequence_parallel;
  auto column = [&](const std::string& name, int64_t out) {
    return parallel::ColumnParallelLinear(parallel::ColumnParallelLinearOptions(h, out)
                                              .name(p + name)
                                              .seed(options.seed)
                                              .bias(options.qkv_bias)
                                              .sequence_parallel(sp),
                                          *tp.tp);
  };
  // Registered in order of use: the parameters are collected in this order.
  if (options.mla.enabled()) {
    latent_ = register_module("mla", LatentAttentionProjection(options, p, tp));
  } else if (kv == options.num_heads) {
    qkv_ = register_module("qkv", column("qkv", 3 * options.num_heads * d_));
  } else {
    q_ = register_module("q", column("q", options.num_heads * d_));
    if (shared) {
      shared_kv_ = register_module("kv", SharedKVProjection(p + "kv", options, *tp.tp));
    } else {
      kv_ = register_module("kv", column("kv", 2 * kv * d_));
    }
  }
  if (options.qk_norm) {
    // One weight of head_dim for every head, each tp rank applying it to its own heads: the
    // partial gradients are summed over tp.
    const bool tp_summed = t > 1;
    q_norm_ = register_module("q_norm", Norm(NormKind::rmsnorm, p + "q_norm", d_, tp_summed, options.norm_eps));
    k_norm_ = register_module("k_norm", Norm(NormKind::rmsnorm, p + "k_norm", d_, tp_summed, options.norm_eps));
  }
  proj_ = register_module("proj", residual_projection(p + "proj", options.num_heads * value_dim_, options, tp));
  if (options.position == PositionKind::rope && !rotary_.defined()) rotary_ = rotary_embedding_of(options);
  causal_mask_ = register_buffer("causal_mask", torch::ones({options.seq_len, options.seq_len}, torch::kBool).triu(1));
  core_fn_ = [this](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) { return core(q, k, v); };
  context_parallel_core_fn_ = [this](const torch::Tensor& packed, const torch::Tensor&, const torch::Tensor&) {
    return context_parallel_core(packed);
  };
}

SelfAttentionImpl::Heads SelfAttentionImpl::project(const torch::Tensor& x, int64_t first_position) {
  // Under context parallelism: this rank's two chunks of the sequence (gathered over tp under
  // sequence parallelism), their positions made once for the queries and the keys.
  const auto positions = tp_.cp_size() > 1 ? tp_.cp_positions(options_.seq_len, x.device()) : torch::Tensor();
  auto rotate = [&](const torch::Tensor& t) {
    return positions.defined() ? rotary_.apply_at(t, positions) : rotary_.apply(t, first_position);
  };
  if (latent_) {
    auto heads = latent_->forward(parallel::enter_column_parallel_region(x, *tp_.tp, tp_.sequence_parallel), rotate);
    return {heads.q, heads.k, heads.v};
  }
  torch::Tensor q, k, v;  // [B, S, heads or kv heads, d]
  if (qkv_) {
    auto qkv = qkv_->forward(x);
    // unbind, not three selects: its backward is one stack, not three zero-filled copies of the whole.
    auto parts = qkv.view({qkv.size(0), qkv.size(1), heads_, 3, d_}).unbind(3);
    q = parts[0], k = parts[1], v = parts[2];
  } else {
    // The query and key/value projections read the same input: one entry into the tp region.
    auto entered = parallel::enter_column_parallel_region(x, *tp_.tp, tp_.sequence_parallel);
    const int64_t b = entered.size(0), s = entered.size(1);
    q = q_->forward_entered(entered).view({b, s, heads_, d_});
    auto kv = (kv_ ? kv_->forward_entered(entered) : shared_kv_->forward_entered(entered))
                  .view({b, s, kv_heads_, 2, d_})
                  .unbind(3);
    k = kv[0], v = kv[1];
  }
  if (q_norm_) {  // over each head's d features, before the rotation (Qwen3)
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  if (rotary_.defined()) {
    q = rotate(q);
    k = rotate(k);
  }
  return {q, k, v};
}

torch::Tensor SelfAttentionImpl::context_parallel_core(const torch::Tensor& packed) {
  const int64_t b = packed.size(0), s = packed.size(1), qd = heads_ * d_, kvd = kv_heads_ * d_;
  auto to_heads = [&](int64_t start, int64_t width, int64_t heads) {
    return packed.narrow(2, start, width).reshape({b, s, heads, d_}).transpose(1, 2);  // [B, heads, S, d]
  };
  auto q = to_heads(0, qd, heads_), k = to_heads(qd, kvd, kv_heads_), v = to_heads(qd + kvd, kvd, kv_heads_);
  const double scale = scale_;
  // Dropout of the probabilities by their global (sample, head, query, key), whichever rank computes them.
  parallel::AttentionDropout dropout;
  if (options_.dropout > 0 && is_training()) {
    dropout = {options_.dropout, parallel::draw_dropout_key(), tp_.tp->rank() * heads_, options_.num_heads,
               s * tp_.cp_size()};
  }
  auto context = tp_.cp_comm == ContextComm::a2a ? parallel::all_to_all_attention(q, k, v, *tp_.cp, scale, dropout)
                                                 : parallel::ring_attention(q, k, v, *tp_.cp, scale, dropout);
  return context.transpose(1, 2).reshape({b, s, qd});
}

torch::Tensor SelfAttentionImpl::core(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  const int64_t b = q.size(0), s = q.size(2), group = heads_ / kv_heads_;
  const bool attention_dropout = options_.dropout > 0 && is_training();
  // LibTorch's fused CPU kernel reads a kv group as it is; elsewhere the groups are repeated
  // (not every fused GPU kernel takes them). Query heads of a group are consecutive: head j
  // reads kv head j / group.
  const bool gqa_in_kernel = group > 1 && !attention_dropout && q.device().is_cpu();
  if (group > 1 && !gqa_in_kernel) {
    k = k.repeat_interleave(group, 1);
    v = v.repeat_interleave(group, 1);
  }
  if (!attention_dropout) {
    // LibTorch's fused attention: on CPU its flash kernel (never the S x S scores; blocks of
    // queries spread over the rank's threads, each output row computed by one thread, so
    // the bits do not depend on the thread count), on GPUs the flash or memory-efficient
    // kernels. With dropout the probabilities are formed below, their masks drawn on the CPU on
    // every device (parallel/tp_rng.h), so that a GPU drops what a CPU drops.
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, scale_, gqa_in_kernel)
        .transpose(1, 2)
        .reshape({b, s, heads_ * d_});
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale_;
  scores = scores.masked_fill(causal_mask_.narrow(0, 0, s).narrow(1, 0, s), -std::numeric_limits<float>::infinity());
  // Heads are split across tp, so each rank draws its own attention-dropout mask.
  auto probs = parallel::dropout(torch::softmax(scores, -1), options_.dropout, is_training(), split_generator());
  return torch::matmul(probs, v).transpose(1, 2).reshape({b, s, heads_ * d_});
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  // Selective recomputation (Korthikanti et al.): the S x S scores and probabilities are
  // most of a block's activation memory and cheap to recompute.
  const bool selective = options_.recompute == Recompute::selective && is_training() && torch::GradMode::is_enabled();
  if (tp_.cp_size() > 1) {
    auto [q, k, v] = project(x, 0);  // at the global positions of this rank's two chunks
    auto packed = torch::cat({q.flatten(2), k.flatten(2), v.flatten(2)}, 2);
    // Under selective recomputation the backward re-runs the ring (or the all-to-all).
    auto context = selective ? parallel::recompute_in_backward(context_parallel_core_fn_, split_generator(), packed)
                             : context_parallel_core(packed);
    return proj_->forward(cut_values(context));
  }
  // The core sees the whole sequence (gathered under sequence parallelism): positions from 0.
  auto [q, k, v] = project(x, 0);
  q = q.transpose(1, 2), k = k.transpose(1, 2), v = v.transpose(1, 2);  // [B, heads or kv heads, S, d]: views
  auto context = selective ? parallel::recompute_in_backward(core_fn_, split_generator(), q, k, v) : core(q, k, v);
  return proj_->forward(cut_values(context));
}

torch::Tensor SelfAttentionImpl::forward_cached(const torch::Tensor& x, KVCache& cache, int64_t layer) {
  TORCH_CHECK(!tp_.sequence_parallel, "incremental decoding runs without sequence parallelism");
  const int64_t first = cache.length(layer), b = x.size(0), s = x.size(1);
  auto [q, k, v] = project(x, first);
  auto [keys, values] = cache.append(layer, k, v);  // [B, kv heads, T, d], T = first + s
  if (kv_heads_ != heads_) {
    // Query heads of a group are consecutive: head j reads kv head j / group.
    keys = keys.repeat_interleave(heads_ / kv_heads_, 1);
    values = values.repeat_interleave(heads_ / kv_heads_, 1);
  }
  auto scores = torch::matmul(q.transpose(1, 2), keys.transpose(-2, -1)) * scale_;
  if (s > 1) {
    // Query i sits at position first + i and sees the keys up to it.
    auto key_positions = torch::arange(first + s, torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    auto query_positions = torch::arange(first, first + s, key_positions.options()).unsqueeze(1);
    scores = scores.masked_fill(key_positions.unsqueeze(0) > query_positions, -std::numeric_limits<float>::infinity());
  }
  auto context = torch::matmul(torch::softmax(scores, -1), values);  // [B, heads, S, d]
  return proj_->forward(cut_values(context.transpose(1, 2).reshape({b, s, heads_ * d_})));
}

torch::Tensor SelfAttentionImpl::cut_values(const torch::Tensor& context) const {
  if (value_dim_ == d_) return context;
  const int64_t b = context.size(0), s = context.size(1);
  return context.view({b, s, heads_, d_}).narrow(-1, 0, value_dim_).reshape({b, s, heads_ * value_dim_});
}

at::Generator* SelfAttentionImpl::split_generator() const {
  return tp_.rng ? &tp_.rng->split() : nullptr;
}

}  // namespace loom::models
