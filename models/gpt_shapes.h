// The parameters of loom's GPT, GPT-2 or Llama shaped, worked out from the
// config alone: global name, whole shape, how tensor parallelism splits each
// and which gradients are summed over tp, in the model's order of use. The
// parameter count, the FLOPs (models/gpt_flops.h), the traffic model
// (models/gpt_traffic.h) and `loom plan` read this one list, so a new shape
// (SwiGLU's third matrix, GQA's smaller key/value projection, an untied output
// layer) is counted everywhere or nowhere; tests/test_traffic.cpp holds it
// against the parameters the model really registers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace loom::models {

struct ParameterShape {
  std::string name;            // global name, as the model registers it ("h.0.attn.q.weight")
  std::vector<int64_t> shape;  // the whole tensor
  int64_t tp_split_dim = -1;   // the dimension tp splits (rounded up: a padded vocabulary); -1: replicated
  // Replicated over tp, but each rank computes a partial gradient that is summed over tp
  // after backward (ParallelParameter::sequence_parallel): what the split sequence feeds
  // under sequence parallelism, and a key/value projection shared by tp / kv_heads ranks.
  bool tp_summed = false;

  int64_t numel() const;
  // Elements one rank of a tp group of TP ranks holds.
  int64_t local_numel(int64_t tp) const;
};

// Whether the key/value projection is replicated over tp (tp > kv_heads: each kv head
// serves tp / kv_heads ranks) rather than split with whole kv heads on each rank.
bool kv_replicated(const Config& config);

// wte and, with learned positions, wpe (first pipeline piece).
std::vector<ParameterShape> gpt_input_parameters(const Config& config);
// Whether the last pipeline piece holds a copy of the word embedding (tied output, or multi-token
// prediction's embedding): models/gpt_options.h's shares_word_embedding, from the config.
inline bool shares_word_embedding(const Config& config) {
  return config.model.tie_embeddings || config.model.mtp.depth > 0;
}
// Block LAYER's parameters (a dense block; an MoE block's experts are counted by model_num_parameters).
std::vector<ParameterShape> gpt_block_parameters(const Config& config, int64_t layer);
// ln_f, untied lm_head, and multi-token prediction's modules, their blocks as dense ones (last
// pipeline piece; a copy of wte there is the pipeline's business).
std::vector<ParameterShape> gpt_output_parameters(const Config& config);

// Parameters of the whole model, every one once (MoE routers and experts included).
int64_t model_num_parameters(const Config& config);
// The parameters of the multi-token prediction modules (model.mtp; counted in model_num_parameters).
int64_t mtp_num_parameters(const Config& config);
// The main model's parameters one token passes through: all but the routed experts it is not sent to
// (an MoE block's num_experts - top_k), multi-token prediction apart; model_num_parameters for a dense model.
int64_t activated_parameters_per_token(const Config& config);
// One routed expert of an MoE block: GELU fc and proj with biases, or SwiGLU gate, up and proj
// (biases as model.bias), of the experts' width (Config::moe_ffn_size).
int64_t moe_expert_numel(const Config& config);
// An MoE block's shared experts (model.moe.n_shared_experts x the experts' width; 0 without).
int64_t moe_shared_numel(const Config& config);

}  // namespace loom::models
