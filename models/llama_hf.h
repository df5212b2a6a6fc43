// A Llama-shaped GPT (model.arch llama) in Hugging Face's Llama names and
// layouts, for `loom export --format hf-llama` and model.init_from. One table
// says which Hugging Face tensors make each loom tensor, so both directions
// read the same correspondence. Hugging Face's rotary embedding is the
// rotate-half one loom uses, so q_proj and k_proj rows need no permutation;
// loom's fused projections keep each head's rows together so that tp splits
// whole heads: attn.qkv rows are [heads, 3 (q, k, v), d] and, under grouped-query
// attention, attn.kv rows [kv heads, 2 (k, v), d] beside attn.q [heads, d].
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace loom::models {

struct HfPart {
  std::string name;
  std::vector<int64_t> shape;
};

// One loom tensor and the Hugging Face tensors it is made of. With groups > 0 the
// loom tensor's rows are [groups, parts, rows / (groups * parts)]: the parts
// interleaved group by group (heads); else it is the one part as it is.
struct LlamaTensor {
  std::string loom;
  std::vector<HfPart> hf;
  int64_t groups = 0;
  bool copy =
      false;  // a second copy the format stores (DeepSeek-V3's MTP layers' embedding and head): written, not read
};

// Every tensor of CONFIG's Llama, in Hugging Face's order (model.embed_tokens, each
// layer's self_attn, mlp and norms, model.norm, lm_head). An MoE block (a Mixtral) has
// block_sparse_moe.gate and block_sparse_moe.experts.N.w1 (gate), w3 (up) and w2 (proj); a
// Qwen3-MoE mlp.gate and mlp.experts.N.gate_proj, up_proj and down_proj; a DeepSeek-V3 (latent
// attention) also mlp.shared_experts and mlp.gate.e_score_correction_bias, as h.N.moe.expert_bias
// (the trainer's expert bias, not a parameter), and its multi-token prediction modules as the layers
// after the main ones (model.layers.{num_layers + k}: the block, enorm, hnorm, eh_proj,
// shared_head.norm, and copies of the word embedding and output layer).
std::vector<LlamaTensor> llama_tensors(const Config& config);

// Whole tensors by loom name -> Hugging Face names and layouts, in Hugging Face's order.
std::vector<std::pair<std::string, torch::Tensor>> llama_to_hf(const std::map<std::string, torch::Tensor>& loom,
                                                               const Config& config);

// Reads a Hugging Face tensor that must have SHAPE; throws InputError naming the
// tensor and its file when it is missing or misshapen.
using HfTensorReader = std::function<torch::Tensor(const std::string& name, const std::vector<int64_t>& shape)>;

// The loom tensor NAME made from the Hugging Face tensors READ gives; nullopt when
// NAME is not one of CONFIG's Llama tensors.
std::optional<torch::Tensor> llama_from_hf(const std::string& name, const HfTensorReader& read, const Config& config);

// Reads loom tensors by name from a Hugging Face model, each by one lookup: an MoE has tens of
// thousands of tensors (Qwen3-30B-A3B 18,867), and a search of the whole list for each of them
// (llama_from_hf above) makes loading quadratic in their number.
class LlamaHfLoader {
 public:
  LlamaHfLoader(HfTensorReader read, const Config& config);
  std::optional<torch::Tensor> operator()(const std::string& name) const;

 private:
  HfTensorReader read_;
  std::map<std::string, LlamaTensor> index_;
};

}  // namespace loom::models
