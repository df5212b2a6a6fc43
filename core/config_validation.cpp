// Every check on a Config, the relations between its keys included: the one place
// a user's config is refused, each refusal an InputError naming the key and what
// would be valid. (A value outside an enum's names never gets this far: it is
// refused when the config is read, core/config_enums.h.)
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/errors.h"

namespace loom {
namespace {

// A refusal of one key, which resolve_and_validate can say the source of.
struct ConfigKeyError : InputError {
  ConfigKeyError(const std::string& key_, const std::string& message)
      : InputError("config key '" + key_ + "': " + message), key(key_) {}
  std::string key;
};

void require(bool ok, const std::string& key, const std::string& message) {
  if (!ok) throw ConfigKeyError(key, message);
}

// parallel.order: a permutation of tp, cp, ep, dp, pp joined by '-' (cp and ep may be left out).
void check_grid_order(const std::string& order) {
  auto bad = [&](const std::string& why) {
    return InputError("config key 'parallel.order': '" + order + "' " + why +
                      "; expected the dimensions tp, cp, ep, dp, pp joined by '-', fastest first, "
                      "like tp-cp-ep-dp-pp");
  };
  const std::vector<std::string> known = {"tp", "cp", "ep", "dp", "pp"};
  std::vector<std::string> seen;
  std::stringstream in(order);
  std::string token;
  while (std::getline(in, token, '-')) {
    if (std::find(known.begin(), known.end(), token) == known.end()) throw bad("has unknown dimension '" + token + "'");
    if (std::find(seen.begin(), seen.end(), token) != seen.end()) throw bad("repeats '" + token + "'");
    seen.push_back(token);
  }
  for (const char* required : {"tp", "dp", "pp"}) {
    if (std::find(seen.begin(), seen.end(), required) == seen.end()) throw bad("lacks tp, dp or pp");
  }
}

// "4 or 8 layers would split; so would pp * virtual_stages of 1, 2, 3 or 6".
std::string layer_split_hint(int64_t layers, int64_t chunks) {
  const int64_t below = layers / chunks * chunks, above = below + chunks;
  std::string hint = (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) +
                     " layers would split; so would pp * virtual_stages of ";
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= layers; ++d) {
    if (layers % d == 0) divisors.push_back(d);
  }
  for (size_t i = 0; i < divisors.size(); ++i) {
    hint += std::to_string(divisors[i]) + (i + 2 == divisors.size() ? " or " : i + 1 == divisors.size() ? "" : ", ");
  }
  return hint;
}

// Grouped-query attention under tensor parallelism, by Megatron-LM's rule: each tp rank
// holds whole kv heads (kv_heads divisible by tp), or each kv head is replicated on
// tp / kv_heads ranks (tp divisible by kv_heads).
void check_attention_heads(const Config& c) {
  const auto& m = c.model;
  const int64_t tp = c.parallel.tp, kv = m.kv_heads();
  require(m.num_kv_heads >= 0, "model.num_kv_heads", "must be 0 (as many as num_heads) or positive");
  require(m.num_heads % kv == 0, "model.num_kv_heads",
          std::to_string(kv) + " key/value heads do not divide model.num_heads = " + std::to_string(m.num_heads) +
              " into equal groups of query heads");
  require(kv % tp == 0 || tp % kv == 0, "model.num_kv_heads",
          std::to_string(kv) + " key/value heads cannot be laid over parallel.tp = " + std::to_string(tp) +
              " ranks: each rank must hold whole kv heads (kv heads divisible by tp) or share one kv head with "
              "others (tp divisible by kv heads)");
}

void check_latent_attention(const Config& c) {
  const auto& m = c.model;
  const auto& a = m.mla;
  for (const auto& [value, key] :
       {std::pair{a.kv_lora_rank, "model.mla.kv_lora_rank"}, std::pair{a.q_lora_rank, "model.mla.q_lora_rank"},
        std::pair{a.qk_nope_head_dim, "model.mla.qk_nope_head_dim"},
        std::pair{a.qk_rope_head_dim, "model.mla.qk_rope_head_dim"}, std::pair{a.v_head_dim, "model.mla.v_head_dim"}}) {
    require(value >= 0, key, "must be 0 or positive");
  }
  if (!a.enabled()) {
    require(a.q_lora_rank == 0, "model.mla.q_lora_rank", "needs latent attention (model.mla.kv_lora_rank > 0)");
    return;
  }
  require(m.position == PositionKind::rope, "model.mla.kv_lora_rank",
          "latent attention rotates part of each head: needs model.position: rope");
  require(a.qk_rope_head_dim >= 2 && a.qk_rope_head_dim % 2 == 0, "model.mla.qk_rope_head_dim",
          "must be even and positive (rope rotates pairs of features)");
  require(a.qk_nope_head_dim >= 1, "model.mla.qk_nope_head_dim", "must be positive under latent attention");
  require(a.v_head_dim >= 1 && a.v_head_dim <= a.qk_head_dim(), "model.mla.v_head_dim",
          "must be positive and at most qk_nope_head_dim + qk_rope_head_dim = " + std::to_string(a.qk_head_dim()) +
              " (each head's values are padded to its keys' width)");
  require(m.kv_heads() == m.num_heads, "model.num_kv_heads",
          "latent attention makes keys and values for every head: leave it 0 or give model.num_heads");
  require(m.attention_head_dim == 0, "model.head_dim",
          "latent attention's heads are sized by model.mla.qk_nope_head_dim, qk_rope_head_dim and v_head_dim");
  require(!m.qkv_bias, "model.qkv_bias", "latent attention's projections have no biases in loom (nor in DeepSeek-V3)");
  require(!m.qk_norm, "model.qk_norm", "latent attention normalises its latents, not each head");
}

void check_model_shape(const Config& c) {
  const auto& m = c.model;
  require(m.norm_eps > 0, "model.norm_eps", "must be positive");
  if (m.position == PositionKind::rope && !m.mla.enabled()) {
    require(m.head_dim() % 2 == 0, "model.position",
            "rope rotates pairs of features: the head dimension (model.head_dim, or hidden_size / num_heads) = " +
                std::to_string(m.head_dim()) + " must be even");
  }
  if (m.position == PositionKind::rope) require(m.rope_theta > 0, "model.rope_theta", "must be positive");
  require(!m.rope_interleave || m.position == PositionKind::rope, "model.rope_interleave",
          "lays out rotary features: needs model.position: rope");
  check_latent_attention(c);
  require(m.mtp.depth >= 0 && m.mtp.depth < m.seq_len, "model.mtp.depth",
          "must be 0 (none) or positive and below model.seq_len");
  require(m.mtp.loss_weight >= 0, "model.mtp.loss_weight", "must be 0 or positive");
  require(m.mtp.depth == 0 || !m.moe.enabled() || m.moe.first_k_dense_replace < m.num_layers,
          "model.moe.first_k_dense_replace",
          "covers every block, so the multi-token prediction blocks after them would be dense, where DeepSeek-V3's "
          "are MoE blocks; lower it below model.num_layers");
  const auto& scaling = m.rope_scaling;
  if (scaling.type == RopeScalingKind::llama3) {
    require(m.position == PositionKind::rope, "model.rope_scaling.type",
            "scales rotary embeddings: needs model.position: rope");
    require(scaling.factor >= 1, "model.rope_scaling.factor", "must be at least 1");
    require(scaling.low_freq_factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor,
            "model.rope_scaling.high_freq_factor",
            "must be above model.rope_scaling.low_freq_factor, which is positive");
    require(scaling.original_max_position_embeddings >= 1, "model.rope_scaling.original_max_position_embeddings",
            "must be positive");
    require(scaling.mscale_all_dim >= 0, "model.rope_scaling.mscale_all_dim", "must be 0 or positive");
  }
  if (scaling.type == RopeScalingKind::yarn) {
    require(m.position == PositionKind::rope, "model.rope_scaling.type",
            "scales rotary embeddings: needs model.position: rope");
    require(scaling.factor >= 1, "model.rope_scaling.factor", "must be at least 1");
    // Equal betas (Kimi-K2's 1 and 1) make the ramp a step, as transformers' does.
    require(scaling.beta_slow > 0 && scaling.beta_fast >= scaling.beta_slow, "model.rope_scaling.beta_fast",
            "must be at least model.rope_scaling.beta_slow, which is positive");
    require(scaling.original_max_position_embeddings >= 1, "model.rope_scaling.original_max_position_embeddings",
            "must be positive");
    require(scaling.mscale >= 0, "model.rope_scaling.mscale", "must be 0 or positive");
    require(scaling.mscale_all_dim >= 0, "model.rope_scaling.mscale_all_dim", "must be 0 or positive");
    require(scaling.attention_factor >= 0, "model.rope_scaling.attention_factor", "must be 0 (derived) or positive");
  }
}

// Every count key has a ceiling far above any model trained today, so that no product of them
// (parameters, tokens per step, bytes) overflows before the memory check (launch/memory_check.h)
// can compare the whole with the machine: 1e18 layers is refused here, not run silently.
void check_count_bounds(const Config& c, int64_t world) {
  struct Ceiling {
    int64_t value;
    int64_t ceiling;
    const char* key;
  };
  const auto& m = c.model;
  const auto& t = c.train;
  constexpr int64_t k14 = int64_t{1} << 14, k18 = int64_t{1} << 18, k20 = int64_t{1} << 20, k24 = int64_t{1} << 24,
                    k28 = int64_t{1} << 28, k40 = int64_t{1} << 40;
  const Ceiling ceilings[] = {{m.num_layers, k14, "model.num_layers"},
                              {m.hidden_size, k18, "model.hidden_size"},
                              {m.num_heads, k18, "model.num_heads"},
                              {m.num_kv_heads, k18, "model.num_kv_heads"},
                              {m.attention_head_dim, k18, "model.head_dim"},
                              {m.mla.kv_lora_rank, k18, "model.mla.kv_lora_rank"},
                              {m.mla.q_lora_rank, k18, "model.mla.q_lora_rank"},
                              {m.mla.qk_nope_head_dim, k18, "model.mla.qk_nope_head_dim"},
                              {m.mla.qk_rope_head_dim, k18, "model.mla.qk_rope_head_dim"},
                              {m.mla.v_head_dim, k18, "model.mla.v_head_dim"},
                              {m.mtp.depth, k14, "model.mtp.depth"},
                              {m.ffn_hidden_size, k20, "model.ffn_hidden_size"},
                              {m.vocab_size, k28, "model.vocab_size"},
                              {m.seq_len, k24, "model.seq_len"},
                              {m.moe.num_experts, k14, "model.moe.num_experts"},
                              {m.moe.top_k, k14, "model.moe.top_k"},
                              {m.moe.moe_intermediate_size, k20, "model.moe.moe_intermediate_size"},
                              {m.moe.n_shared_experts, k14, "model.moe.n_shared_experts"},
                              {t.steps, k40, "train.steps"},
                              {t.global_batch_size, k24, "train.global_batch_size"},
                              {t.micro_batch_size, k24, "train.micro_batch_size"},
                              {t.loss_scale_window, k40, "train.loss_scale_window"},
                              {t.max_skipped_steps, k40, "train.max_skipped_steps"},
                              {t.threads_per_rank, 4096, "train.threads_per_rank"},
                              {c.eval.steps, k20, "eval.steps"},
                              {c.eval.interval, k40, "eval.interval"},
                              {c.log.interval, k40, "log.interval"},
                              {c.checkpoint.interval, k40, "checkpoint.interval"},
                              {c.checkpoint.keep, k20, "checkpoint.keep"},
                              {c.parallel.virtual_stages, k14, "parallel.virtual_stages"}};
  for (const auto& [value, ceiling, key] : ceilings) {
    require(value <= ceiling, key,
            "is " + std::to_string(value) + ", more than loom accepts (" + std::to_string(ceiling) + ")");
  }
  const auto& p = c.parallel;
  // Each parallel size divides the world, so none can exceed it (and their product cannot overflow).
  for (const auto& [value, key] :
       {std::pair{p.tp, "parallel.tp"}, std::pair{p.pp, "parallel.pp"}, std::pair{p.cp, "parallel.cp"},
        std::pair{p.ep, "parallel.ep"}, std::pair{p.dp, "parallel.dp"}}) {
    require(value <= world, key,
            "is " + std::to_string(value) + ", more than the " + std::to_string(world) + " ranks of this job");
  }
  require(p.bucket_mb <= 1 << 20, "parallel.bucket_mb", "must be at most 1048576 (1 TiB)");
}

}  // namespace

// Every check, naming loom's key (resolve_and_validate adds where a config.json gave it).
static void validate(Config& c, int64_t world) {
  require(world >= 1, "world", "must be at least 1");
  check_count_bounds(c, world);
  const auto& m = c.model;
  require(m.num_layers >= 1, "model.num_layers", "must be at least 1");
  require(m.hidden_size >= 1, "model.hidden_size", "must be at least 1");
  require(m.num_heads >= 1, "model.num_heads", "must be at least 1");
  require(m.attention_head_dim >= 0, "model.head_dim", "must be 0 (hidden_size / num_heads) or positive");
  require(m.attention_head_dim > 0 || m.mla.enabled() || m.hidden_size % m.num_heads == 0, "model.hidden_size",
          std::to_string(m.hidden_size) + " is not divisible by model.num_heads=" + std::to_string(m.num_heads) +
              " (or set model.head_dim)");
  require(m.ffn_hidden_size >= 0, "model.ffn_hidden_size",
          "must be 0 (the activation's default: 4 h for gelu, 8h/3 up to a multiple of 256 for swiglu) or positive");
  require(m.vocab_size >= 2, "model.vocab_size", "must be at least 2");
  require(m.seq_len >= 1, "model.seq_len", "must be at least 1");
  require(m.dropout >= 0.0 && m.dropout < 1.0, "model.dropout", "must be in [0, 1)");

  auto& p = c.parallel;
  require(world >= 1, "world", "must be at least 1");
  require(p.tp >= 1, "parallel.tp", "must be at least 1");
  require(p.pp >= 1, "parallel.pp", "must be at least 1");
  require(p.ep >= 1, "parallel.ep", "must be at least 1");
  require(p.expert_tp >= 1, "parallel.expert_tp", "must be at least 1");
  require(p.cp >= 1, "parallel.cp", "must be at least 1");
  const int64_t model_ranks = p.tp * p.cp * p.pp;
  require(world % model_ranks == 0, "parallel.tp",
          "world size " + std::to_string(world) + " is not divisible by tp * cp * pp = " + std::to_string(model_ranks));
  const int64_t dp = world / model_ranks;
  require(p.dp == 0 || p.dp == dp, "parallel.dp",
          "is " + std::to_string(p.dp) + " but world / (tp * cp * pp) = " + std::to_string(dp) +
              "; omit it or set it to " + std::to_string(dp));
  p.dp = dp;
  require(dp % p.ep == 0, "parallel.ep", std::to_string(p.ep) + " does not divide dp = " + std::to_string(dp));
  const auto& moe = m.moe;
  require(moe.num_experts >= 0, "model.moe.num_experts", "must be 0 (no MoE) or positive");
  if (moe.enabled()) {
    require(moe.top_k >= 1 && moe.top_k <= moe.num_experts, "model.moe.top_k",
            "must be in [1, model.moe.num_experts = " + std::to_string(moe.num_experts) + "], got " +
                std::to_string(moe.top_k));
    require(
        moe.every >= 1 && moe.every <= m.num_layers, "model.moe.every",
        "must be in [1, model.num_layers = " + std::to_string(m.num_layers) + "], got " + std::to_string(moe.every));
    require(moe.capacity_factor >= 0, "model.moe.capacity_factor", "must be 0 (no dropping) or positive");
    require(moe.aux_loss_coeff >= 0, "model.moe.aux_loss_coeff", "must be non-negative");
    require(moe.z_loss_coeff >= 0, "model.moe.z_loss_coeff", "must be non-negative");
    require(moe.aux_loss_type == "batch" || moe.aux_loss_type == "sequence" || moe.aux_loss_type == "none",
            "model.moe.aux_loss_type", "must be batch, sequence or none, got '" + moe.aux_loss_type + "'");
    require(moe.router_jitter >= 0 && moe.router_jitter < 1, "model.moe.router_jitter", "must be in [0, 1)");
    require(moe.score == "softmax" || moe.score == "sigmoid", "model.moe.score", "must be softmax or sigmoid");
    require(moe.bias_update_rate >= 0, "model.moe.bias_update_rate", "must be 0 (no expert bias) or positive");
    require(moe.routed_scaling_factor > 0, "model.moe.routed_scaling_factor", "must be positive");
    require(moe.n_group >= 1 && moe.num_experts % moe.n_group == 0, "model.moe.n_group",
            "must divide model.moe.num_experts = " + std::to_string(moe.num_experts));
    require(moe.n_group == 1 || moe.num_experts / moe.n_group >= 2, "model.moe.n_group",
            "groups are scored by their best two experts: each needs at least two");
    require(moe.topk_group >= 1 && moe.topk_group <= moe.n_group, "model.moe.topk_group",
            "must be in [1, model.moe.n_group = " + std::to_string(moe.n_group) + "]");
    require(moe.top_k <= moe.topk_group * (moe.num_experts / moe.n_group), "model.moe.topk_group",
            "leaves " + std::to_string(moe.topk_group * (moe.num_experts / moe.n_group)) +
                " eligible experts, fewer than model.moe.top_k = " + std::to_string(moe.top_k));
    require(moe.moe_intermediate_size >= 0, "model.moe.moe_intermediate_size",
            "must be 0 (model.ffn_hidden_size) or positive");
    require(moe.n_shared_experts >= 0, "model.moe.n_shared_experts", "must be 0 (none) or positive");
    require(moe.n_shared_experts == 0 || moe.n_shared_experts * c.moe_ffn_size() % p.tp == 0,
            "model.moe.n_shared_experts",
            "the shared experts' width " + std::to_string(moe.n_shared_experts * c.moe_ffn_size()) +
                " (n_shared_experts x the experts' width) is not divisible by parallel.tp = " + std::to_string(p.tp));
    require(moe.first_k_dense_replace >= 0 && moe.first_k_dense_replace < m.num_layers,
            "model.moe.first_k_dense_replace",
            "must be in [0, model.num_layers = " + std::to_string(m.num_layers) + "), got " +
                std::to_string(moe.first_k_dense_replace));
    require(moe.decoder_sparse_step >= 1 && moe.decoder_sparse_step <= m.num_layers, "model.moe.decoder_sparse_step",
            "must be in [1, model.num_layers = " + std::to_string(m.num_layers) + "], got " +
                std::to_string(moe.decoder_sparse_step));
    require(moe.decoder_sparse_step == 1 || moe.every == 1, "model.moe.decoder_sparse_step",
            "and model.moe.every both pick the MoE blocks (layer + 1 or layer a multiple of them); set one");
    for (int64_t layer : moe.mlp_only_layers) {
      require(layer >= 0 && layer < m.num_layers, "model.moe.mlp_only_layers",
              "lists block " + std::to_string(layer) +
                  ", outside [0, model.num_layers = " + std::to_string(m.num_layers) + ")");
    }
    bool any_moe = false;
    for (int64_t layer = 0; layer < m.num_layers; ++layer) any_moe = any_moe || moe_block(moe, layer);
    require(any_moe, "model.moe.num_experts",
            "has no block to go to: model.moe.every, first_k_dense_replace, decoder_sparse_step and "
            "mlp_only_layers leave every block dense");
    require(moe.num_experts % p.ep == 0, "model.moe.num_experts",
            std::to_string(moe.num_experts) + " experts cannot be spread evenly over parallel.ep = " +
                std::to_string(p.ep) + " ranks; use a multiple of " + std::to_string(p.ep));
    require(m.init_from.empty() || m.arch == ModelArch::llama, "model.init_from",
            "loads a dense GPT-2, which has no experts; unset model.moe.num_experts");
    require(p.expert_tp == 1 || p.expert_tp == p.tp, "parallel.expert_tp",
            "must be 1 (experts whole on every tp rank) or parallel.tp = " + std::to_string(p.tp) + ", got " +
                std::to_string(p.expert_tp));
    require(c.moe_ffn_size() % p.expert_tp == 0, "parallel.expert_tp",
            std::to_string(p.expert_tp) + " does not divide the experts' width " + std::to_string(c.moe_ffn_size()) +
                " (model.moe.moe_intermediate_size, else model.ffn_hidden_size)");
  } else {
    require(p.expert_tp == 1, "parallel.expert_tp", "splits experts over tp: set model.moe.num_experts");
    require(p.ep == 1, "parallel.ep",
            std::to_string(p.ep) + " needs experts to spread: set model.moe.num_experts (a multiple of " +
                std::to_string(p.ep) + ")");
  }
  require(m.num_heads % p.tp == 0, "model.num_heads",
          std::to_string(m.num_heads) + " is not divisible by parallel.tp=" + std::to_string(p.tp));
  check_attention_heads(c);
  check_model_shape(c);
  require(c.ffn_size() % p.tp == 0, "model.ffn_hidden_size",
          std::to_string(c.ffn_size()) + " is not divisible by parallel.tp=" + std::to_string(p.tp));
  require(!p.sequence_parallel || p.tp > 1, "parallel.sequence_parallel", "needs parallel.tp > 1");
  require(!p.sequence_parallel || m.seq_len % p.tp == 0, "model.seq_len",
          std::to_string(m.seq_len) + " is not divisible by parallel.tp=" + std::to_string(p.tp) +
              " (needed by sequence_parallel)");
  // Each cp rank holds two of the 2 cp equal chunks of a sequence (the causal mask's work balanced).
  require(p.cp == 1 || m.seq_len % (2 * p.cp) == 0, "model.seq_len",
          std::to_string(m.seq_len) + " is not divisible by 2 * parallel.cp = " + std::to_string(2 * p.cp) +
              " (context parallelism cuts each sequence into 2 cp equal chunks)");
  require(!p.sequence_parallel || (m.seq_len / p.cp) % p.tp == 0, "model.seq_len",
          std::to_string(m.seq_len) + " / cp = " + std::to_string(m.seq_len / p.cp) +
              " tokens per cp rank are not divisible by parallel.tp=" + std::to_string(p.tp) +
              " (needed by sequence_parallel)");
  if (p.cp > 1 && p.cp_comm == ContextComm::a2a) {
    const int64_t heads = m.num_heads / p.tp, kv = std::max<int64_t>(m.kv_heads() / p.tp, 1);
    require(heads % p.cp == 0 && kv % p.cp == 0, "parallel.cp_comm",
            "a2a splits each tp rank's " + std::to_string(heads) + " heads and " + std::to_string(kv) +
                " kv heads over parallel.cp = " + std::to_string(p.cp) +
                ", which must divide both; use cp_comm p2p (ring attention) or a cp that divides them");
  }
  require(p.virtual_stages >= 1, "parallel.virtual_stages", "must be at least 1");
  require(m.num_layers % (p.pp * p.virtual_stages) == 0, "model.num_layers",
          std::to_string(m.num_layers) +
              " layers cannot be split into pp * virtual_stages = " + std::to_string(p.pp * p.virtual_stages) +
              " equal chunks; " + layer_split_hint(m.num_layers, p.pp * p.virtual_stages));
  const bool interleaved = p.schedule == PipelineSchedule::interleaved;
  require(!interleaved || p.virtual_stages > 1, "parallel.virtual_stages",
          "the interleaved schedule needs virtual_stages of 2 or more (1 is plain 1f1b)");
  require(!interleaved || p.pp > 1, "parallel.pp", "the interleaved schedule needs pp of 2 or more");
  require(p.schedule != PipelineSchedule::zb_h1 || p.pp > 1, "parallel.pp",
          "the zb-h1 schedule needs pp of 2 or more (one stage has no bubble for weight gradients to fill)");
  require(p.virtual_stages == 1 || interleaved, "parallel.schedule",
          "virtual_stages = " + std::to_string(p.virtual_stages) + " needs the interleaved schedule, not '" +
              to_string(p.schedule) + "'");
  require(p.zero_stage >= 0 && p.zero_stage <= 3, "parallel.zero_stage", "must be 0, 1, 2 or 3");
  require(p.dp_shard >= 0, "parallel.dp_shard", "must be 0 (all of dp) or positive");
  require(p.dp_shard == 0 || dp % p.dp_shard == 0, "parallel.dp_shard",
          std::to_string(p.dp_shard) + " does not divide dp = " + std::to_string(dp) +
              " into equal shard groups (replicas)");
  require(p.dp_shard == 0 || p.dp_shard == dp || p.zero_stage >= 1, "parallel.dp_shard",
          std::to_string(p.dp_shard) +
              " shards ZeRO's state inside groups of that size, and parallel.zero_stage 0 "
              "shards nothing: use zero_stage 1, 2 or 3 (or leave dp_shard 0)");
  // Collectives take their timeout in milliseconds: a bound keeps the conversion finite.
  require(p.timeout_s > 0 && p.timeout_s <= 30 * 24 * 3600.0, "parallel.timeout_s",
          "must be positive and at most 2592000 (30 days)");
  require(c.checkpoint.timeout_s > 0 && c.checkpoint.timeout_s <= 30 * 24 * 3600.0, "checkpoint.timeout_s",
          "must be positive and at most 2592000 (30 days)");
  require(p.bucket_mb >= 0, "parallel.bucket_mb", "must be 0 (one bucket) or positive");
  require(p.ranks_per_node >= 0, "parallel.ranks_per_node", "must be 0 (from the launcher) or positive");
  require(p.ranks_per_node == 0 || world % p.ranks_per_node == 0, "parallel.ranks_per_node",
          std::to_string(p.ranks_per_node) + " does not divide the world of " + std::to_string(world) +
              " ranks into whole nodes");
  require(p.powersgd.rank >= 1, "parallel.powersgd.rank", "must be at least 1");
  require(p.powersgd.start_step >= 0, "parallel.powersgd.start_step", "must be 0 or more");
  // Compression replaces the buckets' all-reduce, which ZeRO 2 and 3 do not have: their gradients
  // are reduce-scattered per unit of blocks.
  require(p.grad_compression == GradCompression::none || p.zero_stage <= 1, "parallel.grad_compression",
          to_string(p.grad_compression) +
              " compresses the gradient buckets' all-reduce of zero_stage 0 and 1; "
              "stages 2 and 3 reduce-scatter their gradients per unit instead (use zero_stage 1, or none)");
  require(p.grad_compression == GradCompression::none || dp * p.cp > 1, "parallel.grad_compression",
          to_string(p.grad_compression) + " compresses the data-parallel reduction, and this layout has dp x cp = 1");
  require(p.grad_compression == GradCompression::none || p.grad_reduce_dtype == GradReduceDtype::fp32,
          "parallel.grad_reduce_dtype",
          "bf16 and parallel.grad_compression both set the buckets' wire format: use grad_compression bf16 alone");
  check_grid_order(p.order);

  auto& t = c.train;
  require(t.steps >= 1, "train.steps", "must be at least 1");
  require(t.micro_batch_size >= 1, "train.micro_batch_size", "must be at least 1");
  require(t.global_batch_size >= 1, "train.global_batch_size", "must be at least 1");
  require(t.global_batch_size % (t.micro_batch_size * dp) == 0, "train.global_batch_size",
          std::to_string(t.global_batch_size) +
              " is not divisible by micro_batch_size * dp = " + std::to_string(t.micro_batch_size) + " * " +
              std::to_string(dp) + "; use a multiple of " + std::to_string(t.micro_batch_size * dp));
  const int64_t micro_batches = t.global_batch_size / (t.micro_batch_size * dp);
  require(p.pp == 1 || micro_batches >= p.pp, "train.global_batch_size",
          std::to_string(t.global_batch_size) + " gives " + std::to_string(micro_batches) +
              " micro-batches per step (global_batch_size / (micro_batch_size * dp)), fewer than parallel.pp = " +
              std::to_string(p.pp) + ", so stages would stand idle; use at least " +
              std::to_string(p.pp * t.micro_batch_size * dp));
  require(!interleaved || micro_batches % p.pp == 0, "train.global_batch_size",
          std::to_string(t.global_batch_size) + " gives " + std::to_string(micro_batches) +
              " micro-batches per step; the interleaved schedule needs a multiple of parallel.pp = " +
              std::to_string(p.pp) + " (global_batch_size a multiple of " +
              std::to_string(p.pp * t.micro_batch_size * dp) + ")");
  require(t.lr > 0, "train.lr", "must be positive");
  require(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", "must be in [0, train.lr]");
  require(t.lr_decay_steps >= 0 && t.lr_decay_steps <= (int64_t{1} << 40), "train.lr_decay_steps",
          "must be in [0, 2^40] (0: train.steps - train.warmup_steps)");
  if (t.lr_decay_style == LrDecayStyle::wsd) {
    const int64_t decay = t.lr_decay_steps > 0 ? t.lr_decay_steps : t.steps - t.warmup_steps;
    require(t.lr_wsd_decay_steps >= 1 && t.lr_wsd_decay_steps <= decay, "train.lr_wsd_decay_steps",
            "is " + std::to_string(t.lr_wsd_decay_steps) + "; wsd needs it in [1, " + std::to_string(decay) +
                "] (the decay's length)");
  }
  require(t.warmup_steps >= 0 && t.warmup_steps <= t.steps, "train.warmup_steps",
          "is " + std::to_string(t.warmup_steps) + ", outside [0, train.steps = " + std::to_string(t.steps) + "]");
  require(t.weight_decay >= 0, "train.weight_decay", "must be non-negative");
  require(t.grad_clip >= 0, "train.grad_clip", "must be non-negative (0 turns clipping off)");
  require(t.adam_beta1 >= 0 && t.adam_beta1 < 1, "train.adam_beta1", "must be in [0, 1)");
  require(t.adam_beta2 >= 0 && t.adam_beta2 < 1, "train.adam_beta2", "must be in [0, 1)");
  require(t.adam_eps > 0, "train.adam_eps", "must be positive");
  require(t.muon.lr >= 0, "train.muon.lr", "must be 0 (train.lr) or positive");
  require(t.muon.weight_decay == -1 || t.muon.weight_decay >= 0, "train.muon.weight_decay",
          "must be -1 (train.weight_decay) or non-negative");
  require(t.muon.momentum >= 0 && t.muon.momentum < 1, "train.muon.momentum", "must be in [0, 1)");
  require(t.muon.ns_steps >= 1 && t.muon.ns_steps <= 100, "train.muon.ns_steps", "must be in [1, 100]");
  require(t.muon.ns_dtype == "fp32" || t.muon.ns_dtype == "bf16", "train.muon.ns_dtype", "must be fp32 or bf16");
  require(t.seed >= 0, "train.seed", "must be non-negative");
  require(t.loss_scale >= 0, "train.loss_scale", "must be 0 (dynamic) or a positive fixed scale");
  require(t.initial_loss_scale > 0, "train.initial_loss_scale", "must be positive");
  require(t.loss_scale_window >= 1, "train.loss_scale_window", "must be at least 1");
  require(t.min_loss_scale > 0 && t.min_loss_scale <= t.initial_loss_scale, "train.min_loss_scale",
          "must be positive and at most train.initial_loss_scale");
  require(t.threads_per_rank >= 0, "train.threads_per_rank", "must be 0 (automatic) or positive");
  require(t.peak_tflops >= 0.0, "train.peak_tflops", "must be 0 (the device's known peak, if any) or positive");
  require(t.step_timeout_s == 0 || (t.step_timeout_s >= 1 && t.step_timeout_s <= 30 * 24 * 3600.0),
          "train.step_timeout_s", "must be 0 (automatic) or seconds in [1, 2592000 (30 days)]");
  require(t.exit_after >= -1 && t.exit_after <= t.steps, "train.exit_after",
          "must be -1 (never) or a step in [0, train.steps], got " + std::to_string(t.exit_after));
  require(t.exit_after < 0 || !c.checkpoint.dir.empty(), "checkpoint.dir",
          "is needed by train.exit_after (it saves before exiting)");
  require(t.exit_duration_mins >= 0 && t.exit_duration_mins <= 366 * 24 * 60.0, "train.exit_duration_mins",
          "must be 0 (never) or minutes, at most a year");
  require(t.exit_duration_mins == 0 || !c.checkpoint.dir.empty(), "checkpoint.dir",
          "is needed by train.exit_duration_mins (it saves before exiting)");
  require(t.max_skipped_steps >= 1, "train.max_skipped_steps",
          "must be at least 1 (a run stops after this many non-finite steps in a row)");
  require(c.checkpoint.interval == 0 || !c.checkpoint.dir.empty(), "checkpoint.dir",
          "is needed by checkpoint.interval > 0");

  require(c.checkpoint.interval >= 0, "checkpoint.interval", "must be non-negative");
  require(c.checkpoint.keep >= 1, "checkpoint.keep", "must be at least 1");
  require(c.log.interval >= 1, "log.interval", "must be at least 1");
  require(c.log.profile_step_start >= 0 && c.log.profile_step_start <= c.train.steps, "log.profile_step_start",
          "must be 0 (off) or a step of the run, at most train.steps = " + std::to_string(c.train.steps));
  require(c.log.profile_step_end == 0 ||
              (c.log.profile_step_end >= c.log.profile_step_start && c.log.profile_step_end <= c.train.steps),
          "log.profile_step_end",
          "must be 0 or a step from log.profile_step_start = " + std::to_string(c.log.profile_step_start) +
              " to train.steps = " + std::to_string(c.train.steps));
  require(c.eval.interval >= 0, "eval.interval", "must be non-negative (0: only at the last step)");
  require(c.eval.steps >= 1, "eval.steps", "must be at least 1");
  require(c.data.split.empty() || c.data.valid_path.empty(), "data.split",
          "and data.valid_path both give validation data: set one of them");
  require(c.data.eod_id >= -1 && c.data.eod_id < c.model.vocab_size, "data.eod_id",
          "must be -1 (the datasets' sidecars' eos_id) or a token id below model.vocab_size = " +
              std::to_string(c.model.vocab_size));
  // Multi-token prediction embeds the targets as its next inputs (an ignored -100 has no embedding)
  // and takes each depth's mean over its own shifted targets: not built beside the mask.
  require(!c.data.eod_mask_loss || c.model.mtp.depth == 0, "data.eod_mask_loss",
          "is not built beside multi-token prediction (model.mtp.depth = " + std::to_string(c.model.mtp.depth) +
              "): set one of them");
}

void resolve_and_validate(Config& c, int64_t world) {
  try {
    validate(c, world);
  } catch (const ConfigKeyError& e) {
    if (!c.hf_keys.count(e.key)) throw;
    throw InputError(std::string(e.what()) + " (" + e.key + " is read from " + c.hf_file + ")");
  }
}

}  // namespace loom
