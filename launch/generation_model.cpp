#include "launch/generation_model.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checkpoint_directory.h"
#include "core/checkpoint_store.h"
#include "core/errors.h"
#include "core/hf_config.h"
#include "core/logging.h"
#include "core/regular_file.h"
#include "launch/checkpoint.h"
#include "launch/hf_source.h"
#include "launch/model_record.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;

bool is_checkpoint(const fs::path& dir) {
  require_regular_file((dir / "manifest.json").string(), "checkpoint manifest");  // (a symlink loop, a FIFO)
  std::error_code error;
  return fs::is_regular_file(dir / "manifest.json", error);
}

// A checkpoint directory itself, or the one a checkpoint.dir's `--resume auto` would continue from
// (`latest`, or a save announced and not yet in it; else its newest).
std::string checkpoint_path(const std::string& model) {
  if (is_checkpoint(model)) return model;
  const auto candidates = resume_candidates(model);
  if (candidates.empty()) return "";
  // (Set aside, or removed by hand since: the newest is not the checkpoint the user last trained.)
  if (const std::string missing = latest_names_missing(model); !missing.empty()) {
    warn0("'{}': its 'latest' names '{}', which is not one of its checkpoints: generating from {}", model, missing,
          candidates.front().path);
  }
  return candidates.front().path;
}

GenerationModel from_checkpoint(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string problem = verify_checkpoint(path);
  if (!problem.empty()) throw InputError("loom generate: " + problem);
  const auto manifest = read_manifest(path);
  const std::string source = path + "/manifest.json";
  GenerationModel model;
  model.path = path;
  model.config = config_of_model_record(manifest.at("model"), source);
  if (model.config.model.moe.enabled()) {
    // The record keeps the experts' shapes; the router's settings (top_k, scores, groups), which the
    // forward needs, are the manifest's moe_router. Without them (checkpoints of before it)
    // generating with defaults would be silently another model.
    if (!manifest.contains("moe_router")) {
      throw InputError("loom generate: " + path +
                       " is a Mixture-of-Experts checkpoint saved before loom recorded the router's settings "
                       "(manifest.json has no moe_router); resume it with this loom to save a newer one");
    }
    apply_moe_router_record(model.config, manifest.at("moe_router"), source);
  }
  for (const auto& o : overrides) apply_override(model.config, o);
  const auto saved = complete_model_record(manifest.at("model"));
  const auto asked = complete_model_record(model_record(model.config));
  for (const auto& [key, value] : saved.items()) {
    if (asked.value(key, nlohmann::json()) != value) {
      throw InputError("--set model." + key + ": the checkpoint " + path + " has model." + key + " = " + value.dump() +
                       "; loom generate runs the model as it was saved");
    }
  }
  model.max_positions = model.config.model.seq_len;
  model.max_positions_key = "model.seq_len";
  if (manifest.contains("tokenizer")) {
    model.tokenizer_record = manifest.at("tokenizer");
    model.tokenizer_vocab_size = model.tokenizer_record.value("vocab_size", int64_t{0});
  }
  const auto hf_source = manifest.value("hf_source", nlohmann::json());
  model.stop_ids = hf_stop_ids(hf_source, source);
  model.from_hugging_face_source = hf_source.is_object();
  model.bos_id = hf_bos_id(hf_source);
  return model;
}

GenerationModel from_hugging_face(const std::string& dir, const std::vector<std::string>& overrides) {
  const fs::path file = fs::path(dir) / "config.json";
  require_regular_file(file.string(), "MODEL's config");
  std::ifstream in(file);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError("MODEL " + file.string() + " is not valid JSON: " + e.what());
  }
  GenerationModel model;
  model.path = dir;
  model.hugging_face = true;
  auto& config = model.config;
  apply_override(config, "model.init_from=" + dir);
  for (const auto& o : overrides) apply_override(config, o);
  std::set<std::string> overridden;
  for (const auto& o : overrides) overridden.insert(o.substr(0, o.find('=')));
  resolve_model_defaults(config);
  // The positions come from config.json, not from a config's model.seq_len; 1 passes
  // apply_hf_config's check that n_positions covers it, and generate sets what it needs.
  config.model.seq_len = 1;
  apply_hf_config(config, overridden);
  const char* key = config.model.arch == ModelArch::gpt2 ? "n_positions" : "max_position_embeddings";
  const auto positions = json.value(key, nlohmann::json(config.model.arch == ModelArch::gpt2 ? 1024 : 2048));
  if (!positions.is_number_integer() || positions.get<int64_t>() < 1) {
    throw InputError(file.string() + ": \"" + key + "\" must be a positive integer, not " + positions.dump());
  }
  model.max_positions = positions.get<int64_t>();
  // loom's attention is full, a sliding window's equal only while the sequence fits in the window.
  if (const int64_t window = hf_sliding_window(json, file.string()); window > 0 && window < model.max_positions) {
    model.max_positions = window;
    model.max_positions_key = "sliding_window";
  }
  const auto hf_source = read_hf_source(dir);
  model.stop_ids = hf_stop_ids(hf_source, dir);
  model.from_hugging_face_source = true;
  model.bos_id = hf_bos_id(hf_source);
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    std::error_code error;
    if (fs::is_regular_file(fs::path(dir) / name, error)) {
      model.tokenizer = (fs::path(dir) / name).string();
      break;
    }
  }
  return model;
}

}  // namespace

GenerationModel describe_generation_model(const std::string& model, const std::vector<std::string>& overrides) {
  std::error_code error;
  if (!fs::is_directory(model, error)) {
    throw InputError("MODEL '" + model + "' is not a directory: give a loom checkpoint (step_N or checkpoint.dir) " +
                     "or a Hugging Face model directory");
  }
  if (const std::string checkpoint = checkpoint_path(model); !checkpoint.empty()) {
    return from_checkpoint(checkpoint, overrides);
  }
  require_regular_file((fs::path(model) / "config.json").string(), "MODEL's config");
  if (fs::is_regular_file(fs::path(model) / "config.json", error)) return from_hugging_face(model, overrides);
  throw InputError("MODEL '" + model +
                   "' is neither a loom checkpoint (no manifest.json, nor complete step_N checkpoints) "
                   "nor a Hugging Face model directory (no config.json)");
}

std::vector<std::vector<double>> generation_expert_bias(const GenerationModel& model) {
  if (model.hugging_face) return expert_bias_from_pretrained(model.config);
  const auto manifest = read_manifest(model.path);
  if (!manifest.contains("expert_bias")) return {};
  return manifest.at("expert_bias").get<std::vector<std::vector<double>>>();
}

void load_generation_weights(const GenerationModel& model, const std::vector<parallel::ParallelParameter>& params,
                             int64_t tp_rank, int64_t tp_size) {
  if (model.hugging_face) {
    init_from_pretrained(model.config, params, tp_rank, tp_size);
    return;
  }
  const auto manifest = read_manifest(model.path);
  std::vector<torch::Tensor> into;
  for (const auto& p : params) into.push_back(p.tensor);
  load_parameter_slices(
      params, into, tp_rank, tp_size,
      [&](const std::string& name, int64_t dim, int64_t offset, int64_t length) {
        return read_tensor_slice(model.path, manifest, "model/" + name, dim, offset, length);
      },
      "checkpoint '" + model.path + "'");
}

}  // namespace loom::launch
