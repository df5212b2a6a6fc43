#include "models/gpt_hf.h"

#include "core/errors.h"

namespace loom::models {
namespace {

// loom's QKV rows are [heads, 3, d]; Hugging Face's are [3, heads, d]. Works on rows (dim 0).
torch::Tensor swap_head_and_qkv(const torch::Tensor& rows, int64_t first, int64_t second) {
  auto shape = rows.sizes().vec();
  std::vector<int64_t> split{first, second, rows.size(0) / (first * second)};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  std::vector<int64_t> order(split.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::swap(order[0], order[1]);
  return rows.reshape(split).permute(order).reshape(shape).contiguous();
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> gpt_to_hf(const std::map<std::string, torch::Tensor>& loom,
                                                             int64_t num_layers, int64_t num_heads) {
  auto get = [&](const std::string& name) {
    auto it = loom.find(name);
    TORCH_CHECK(it != loom.end(), "GPT tensor ", name, " is missing");
    return it->second;
  };
  std::vector<std::pair<std::string, torch::Tensor>> out{{"wte.weight", get("wte")}, {"wpe.weight", get("wpe")}};
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    out.emplace_back(h + "ln_1.weight", get(h + "ln_1.weight"));
    out.emplace_back(h + "ln_1.bias", get(h + "ln_1.bias"));
    out.emplace_back(h + "attn.c_attn.weight",
                     swap_head_and_qkv(get(h + "attn.qkv.weight"), num_heads, 3).t().contiguous());
    out.emplace_back(h + "attn.c_attn.bias", swap_head_and_qkv(get(h + "attn.qkv.bias"), num_heads, 3));
    out.emplace_back(h + "attn.c_proj.weight", get(h + "attn.proj.weight").t().contiguous());
    out.emplace_back(h + "attn.c_proj.bias", get(h + "attn.proj.bias"));
    out.emplace_back(h + "ln_2.weight", get(h + "ln_2.weight"));
    out.emplace_back(h + "ln_2.bias", get(h + "ln_2.bias"));
    out.emplace_back(h + "mlp.c_fc.weight", get(h + "mlp.fc.weight").t().contiguous());
    out.emplace_back(h + "mlp.c_fc.bias", get(h + "mlp.fc.bias"));
    out.emplace_back(h + "mlp.c_proj.weight", get(h + "mlp.proj.weight").t().contiguous());
    out.emplace_back(h + "mlp.c_proj.bias", get(h + "mlp.proj.bias"));
  }
  out.emplace_back("ln_f.weight", get("ln_f.weight"));
  out.emplace_back("ln_f.bias", get("ln_f.bias"));
  return out;
}

std::map<std::string, torch::Tensor> gpt_from_hf(const std::map<std::string, torch::Tensor>& hf, int64_t num_layers,
                                                 int64_t num_heads, const std::string& file) {
  auto get = [&](const std::string& name) {
    // Some exports prefix every name with "transformer.".
    auto it = hf.find(name);
    if (it == hf.end()) it = hf.find("transformer." + name);
    if (it == hf.end()) {
      throw InputError("model.init_from: '" + file + "' has no tensor '" + name + "' (is it a GPT-2 with " +
                       std::to_string(num_layers) + " layers?)");
    }
    return it->second;
  };
  std::map<std::string, torch::Tensor> out{{"wte", get("wte.weight")}, {"wpe", get("wpe.weight")}};
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    out[h + "ln_1.weight"] = get(h + "ln_1.weight");
    out[h + "ln_1.bias"] = get(h + "ln_1.bias");
    out[h + "attn.qkv.weight"] = swap_head_and_qkv(get(h + "attn.c_attn.weight").t().contiguous(), 3, num_heads);
    out[h + "attn.qkv.bias"] = swap_head_and_qkv(get(h + "attn.c_attn.bias"), 3, num_heads);
    out[h + "attn.proj.weight"] = get(h + "attn.c_proj.weight").t().contiguous();
    out[h + "attn.proj.bias"] = get(h + "attn.c_proj.bias");
    out[h + "ln_2.weight"] = get(h + "ln_2.weight");
    out[h + "ln_2.bias"] = get(h + "ln_2.bias");
    out[h + "mlp.fc.weight"] = get(h + "mlp.c_fc.weight").t().contiguous();
    out[h + "mlp.fc.bias"] = get(h + "mlp.c_fc.bias");
    out[h + "mlp.proj.weight"] = get(h + "mlp.c_proj.weight").t().contiguous();
    out[h + "mlp.proj.bias"] = get(h + "mlp.c_proj.bias");
  }
  out["ln_f.weight"] = get("ln_f.weight");
  out["ln_f.bias"] = get("ln_f.bias");
  return out;
}

}  // namespace loom::models
