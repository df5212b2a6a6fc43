// GPT in Hugging Face's GPT-2 names and layouts, for `loom export --format
// hf-gpt2` and `model.init_from`. Hugging Face stores the four linear layers
// of a block as Conv1D, whose weight is [in, out] (the transpose of loom's
// [out, in]), and orders the fused QKV columns q (all heads), k, v, where
// loom keeps each head's q, k, v together so that tp splits whole heads.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace loom::models {

// Whole tensors by loom name -> Hugging Face name and layout, in GPT-2's order.
std::vector<std::pair<std::string, torch::Tensor>> gpt_to_hf(const std::map<std::string, torch::Tensor>& loom,
                                                             int64_t num_layers, int64_t num_heads);

// The inverse. Throws InputError naming FILE and the tensor when one is missing or misshapen.
std::map<std::string, torch::Tensor> gpt_from_hf(const std::map<std::string, torch::Tensor>& hf, int64_t num_layers,
                                                 int64_t num_heads, const std::string& file);

}  // namespace loom::models
