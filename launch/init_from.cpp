// model.init_from: a fresh run's weights from a Hugging Face model directory or a GPT-2
// .safetensors file, each rank reading its own slices (launch/checkpoint.h).
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/crc32c.h"
#include "core/errors.h"
#include "core/hf_architecture.h"
#include "core/hf_weights.h"
#include "core/logging.h"
#include "core/safetensors.h"
#include "launch/checkpoint.h"
#include "launch/hf_source.h"
#include "launch/moe_metrics.h"
#include "models/gpt_hf.h"
#include "models/llama_hf.h"
#include "parallel/process_groups.h"

namespace loom::launch {

namespace fs = std::filesystem;

namespace {

// The multi-token prediction module (0-based) a loom parameter belongs to: mtp.K.* or the block
// h.L.* with L >= NUM_LAYERS; -1 for the main model's.
int64_t mtp_module_of(const std::string& name, int64_t num_layers) {
  const bool module = name.rfind("mtp.", 0) == 0, block = name.rfind("h.", 0) == 0;
  if (!module && !block) return -1;
  const auto start = module ? 4 : 2;
  const int64_t index = std::stoll(name.substr(start, name.find('.', start) - start));
  if (module) return index;
  return index >= num_layers ? index - num_layers : -1;
}

// How many of CONFIG's multi-token prediction layers (model.layers.{num_layers + k}) WEIGHTS holds.
int64_t mtp_layers_held(const HfWeights& weights, const Config& config) {
  const auto names = weights.names();
  int64_t held = 0;
  while (held < config.model.mtp.depth &&
         std::find(names.begin(), names.end(),
                   "model.layers." + std::to_string(config.model.num_layers + held) + ".eh_proj.weight") != names.end())
    ++held;
  return held;
}

// A config.json that says tie_word_embeddings but a file that holds its own lm_head.weight, other
// than the embedding: loom would train the embedding as the output layer and drop the file's, a
// different model from the one saved. The same values (a tied model saved with both) are fine.
void refuse_untied_output_of_tied_model(const HfWeights& weights, const Config& config) {
  if (!config.model.tie_embeddings) return;
  const auto names = weights.names();
  const bool both = std::find(names.begin(), names.end(), "lm_head.weight") != names.end() &&
                    std::find(names.begin(), names.end(), "model.embed_tokens.weight") != names.end();
  if (!both) return;
  // (Read whole, on every rank, only for such a file: transformers saves a tied model without lm_head.)
  const auto output = weights.read("lm_head.weight"), embedding = weights.read("model.embed_tokens.weight");
  if (output.sizes() == embedding.sizes() && torch::equal(output, embedding)) return;
  throw InputError("model.init_from: '" + config.model.init_from +
                   "' holds an lm_head.weight other than model.embed_tokens.weight, but its config.json says "
                   "\"tie_word_embeddings\": true, which would train the embedding as the output layer and drop "
                   "lm_head.weight; set it to false in config.json to keep both");
}

}  // namespace

std::vector<std::string> init_from_pretrained(const Config& config,
                                              const std::vector<parallel::ParallelParameter>& params, int64_t tp_rank,
                                              int64_t tp_size) {
  const std::string& source = config.model.init_from;
  const auto& m = config.model;
  // Each rank reads, tensor by tensor, only the whole tensors its parameters are slices of.
  std::function<std::optional<torch::Tensor>(const std::string&)> whole;
  std::optional<HfWeights> weights;
  std::map<std::string, torch::Tensor> gpt2;
  std::set<std::string> read_names;
  std::string what = "a Hugging Face GPT-2 file";
  if (fs::is_directory(source)) {
    weights.emplace(source);
    // Named by its class (MixtralForCausalLM, DeepseekV3ForCausalLM), not only the family loom builds.
    const auto hf_source = read_hf_source(source);
    const std::string architecture = hf_source.is_null() ? "" : hf_architecture(hf_source.at("config"));
    what = "a Hugging Face " +
           (architecture.empty() ? std::string(m.arch == ModelArch::llama ? "Llama" : "GPT-2") : architecture) +
           " directory";
  }
  if (m.arch == ModelArch::llama) {
    if (!weights) {
      throw InputError("model.init_from: '" + source +
                       "' is a file, read as a Hugging Face GPT-2; a Llama comes from a Hugging Face model directory "
                       "(config.json and model.safetensors)");
    }
    const models::HfTensorReader read = [&](const std::string& name, const std::vector<int64_t>& shape) {
      read_names.insert(name);
      return weights->read(name, shape);
    };
    refuse_untied_output_of_tied_model(*weights, config);
    whole = models::LlamaHfLoader(read, config);
  } else {
    // GPT-2s are small: read whole.
    std::map<std::string, torch::Tensor> tensors;
    if (weights) {
      for (const auto& name : weights->names()) tensors[name] = weights->read(name);
    } else {
      tensors = read_safetensors(source);
    }
    gpt2 = models::gpt_from_hf(tensors, m.num_layers, m.num_heads, source);
    // Position p's embedding is row p whatever the table's length, so a model trained on longer
    // sequences fine-tunes at a shorter context with its first seq_len rows; a shorter table has
    // nothing for the last positions.
    auto& wpe = gpt2.at("wpe");
    if (wpe.dim() == 2 && wpe.size(0) > m.seq_len) {
      info0("model.init_from: '{}' has position embeddings for {} tokens; the first {} (model.seq_len) are used",
            source, wpe.size(0), m.seq_len);
      wpe = wpe.narrow(0, 0, m.seq_len);
    } else if (wpe.dim() == 2 && wpe.size(0) < m.seq_len) {
      throw InputError("model.init_from: '" + source + "' has position embeddings (wpe) for " +
                       std::to_string(wpe.size(0)) + " tokens, fewer than model.seq_len = " +
                       std::to_string(m.seq_len) + "; set model.seq_len to at most " + std::to_string(wpe.size(0)));
    }
    whole = [&](const std::string& name) -> std::optional<torch::Tensor> {
      auto it = gpt2.find(name);
      if (it == gpt2.end()) return std::nullopt;
      return it->second;
    };
  }
  std::vector<torch::Tensor> into;
  std::map<std::string, torch::Tensor> own;  // this rank's parameters, by global name
  for (const auto& p : params) into.push_back(p.tensor), own[p.name] = p.tensor;
  // Multi-token prediction modules the directory does not hold (a model released without them, or
  // fewer than model.mtp.depth) keep loom's initialisation.
  const int64_t held = weights ? mtp_layers_held(*weights, config) : 0;
  if (weights && held < m.mtp.depth) {
    info0(
        "model.init_from: '{}' holds {} multi-token prediction layer(s); modules {}..{} start from loom's "
        "initialisation",
        source, held, held, m.mtp.depth - 1);
  }
  load_parameter_slices(
      params, into, tp_rank, tp_size,
      [&](const std::string& name, int64_t dim, int64_t offset, int64_t length) -> std::optional<torch::Tensor> {
        if (mtp_module_of(name, m.num_layers) >= held) return own.at(name);  // this rank's slice, as it is
        auto tensor = whole(name);
        // A tensor too small for the slice is returned whole, so the shape check names it.
        if (!tensor || dim < 0 || offset + length > tensor->size(dim)) return tensor;
        return tensor->narrow(dim, offset, length);
      },
      "model.init_from '" + source + "'");
  info0("initialised the model from {} ({})", source, what);
  return {read_names.begin(), read_names.end()};
}

void warn_unused_hf_tensors(const Config& config, const std::vector<std::string>& read_here,
                            parallel::ProcessGroups& groups) {
  const std::string& source = config.model.init_from;
  if (config.model.arch != ModelArch::llama || !fs::is_directory(source)) return;
  std::vector<std::string> names;
  std::string joined;
  std::optional<HfWeights> weights;
  try {
    weights.emplace(source);
    names = weights->names();
    std::sort(names.begin(), names.end());
    for (const auto& name : names) joined += name + '\n';
  } catch (const std::exception&) {
    names.clear(), joined = "-";  // gone since the load: no list to compare, and no warning
  }
  // The ranks must hold the same list to compare their reads position by position (each reads its
  // node's copy; a resume tolerates copies that differ): its size and CRC-32C, each with its
  // negation so that one maximum gives both the largest and the smallest.
  const auto size = static_cast<double>(joined == "-" ? -1 : static_cast<int64_t>(names.size()));
  const auto crc = static_cast<double>(crc32c(joined));
  auto agree = torch::tensor({size, -size, crc, -crc}, torch::kFloat64);
  groups.world_comm().all_reduce(agree, parallel::ReduceOp::max).wait();
  const bool same = agree[0].item<double>() == -agree[1].item<double>() &&
                    agree[2].item<double>() == -agree[3].item<double>() && agree[0].item<double>() >= 0;
  if (!same) return;
  const std::set<std::string> mine(read_here.begin(), read_here.end());
  std::vector<float> mask(names.size());
  for (size_t i = 0; i < names.size(); ++i) mask[i] = mine.count(names[i]) ? 1.0F : 0.0F;
  auto read = torch::tensor(mask);
  groups.world_comm().all_reduce(read, parallel::ReduceOp::max).wait();
  const float* read_anywhere = read.data_ptr<float>();
  const int64_t layers = config.model.num_layers + config.model.mtp.depth;
  std::vector<std::string> unused;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    if (read_anywhere[i] > 0) continue;
    if (config.model.moe.expert_bias && name.find("e_score_correction_bias") != std::string::npos) continue;
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    // transformers builds DeepSeek-V3's shared experts even when n_shared_experts is 0, as tensors of
    // no rows or columns, which save_pretrained writes: nothing to use.
    if (name.find(".shared_experts.") != std::string::npos && config.model.moe.n_shared_experts == 0) {
      try {
        const auto& shape = weights->shape(name);
        if (std::find(shape.begin(), shape.end(), 0) != shape.end()) continue;
      } catch (const std::exception&) {
      }
    }
    if (name.rfind("model.layers.", 0) == 0) {
      const int64_t layer = std::stoll(name.substr(13));
      if (layer >= layers) continue;  // multi-token prediction layers the model does not build
      // A multi-token prediction layer's own copies of the embedding and the output layer: loom
      // trains the main model's, and exports them as copies.
      const bool copy =
          name.find(".embed_tokens.") != std::string::npos || name.find(".shared_head.head.") != std::string::npos;
      if (layer >= config.model.num_layers && copy) continue;
    }
    // A tied model saved with its output layer too: refuse_untied_output_of_tied_model found them equal.
    if (config.model.tie_embeddings && name == "lm_head.weight") continue;
    unused.push_back(name);
  }
  if (unused.empty()) return;
  std::string named;
  for (size_t i = 0; i < unused.size() && i < 8; ++i) named += (i ? ", " : "") + unused[i];
  if (unused.size() > 8) named += " and " + std::to_string(unused.size() - 8) + " more";
  warn0(
      "model.init_from: {} tensor(s) of '{}' are not part of the model its config.json describes, and are not "
      "used: {}. Check config.json against the weights (num_experts, mlp_only_layers, attention_bias, ...)",
      unused.size(), source, named);
}

std::vector<std::vector<double>> expert_bias_from_pretrained(const Config& config) {
  const std::string& source = config.model.init_from;
  if (!config.model.moe.expert_bias || config.model.arch != ModelArch::llama || !fs::is_directory(source)) return {};
  HfWeights weights(source);
  const models::LlamaHfLoader whole(
      [&](const std::string& name, const std::vector<int64_t>& shape) { return weights.read(name, shape); }, config);
  std::vector<std::vector<double>> biases;
  const int64_t held = mtp_layers_held(weights, config);
  for (int64_t layer : moe_layers(config)) {
    if (layer >= config.model.num_layers + held) {  // a multi-token prediction module not in the directory
      biases.emplace_back(static_cast<size_t>(config.model.moe.num_experts), 0.0);
      continue;
    }
    auto bias = whole("h." + std::to_string(layer) + ".moe.expert_bias");
    if (!bias) return {};  // a model family whose router has no bias
    auto values = bias->to(torch::kFloat64).contiguous();
    biases.emplace_back(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
  }
  return biases;
}

}  // namespace loom::launch
