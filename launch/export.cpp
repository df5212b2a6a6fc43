// loom export: a checkpoint's model as a Hugging Face model directory
// (config.json, generation_config.json and safetensors weights, sharded above
// --max-shard-size) that transformers' from_pretrained loads, or as one GPT-2
// .safetensors file. A model fine-tuned from a Hugging Face directory keeps its
// architecture and config fields (launch/hf_source.h).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "core/checkpoint_store.h"
#include "core/config.h"
#include "core/errors.h"
#include "core/hf_config.h"
#include "core/hf_weights.h"
#include "core/logging.h"
#include "core/safetensors.h"
#include "core/sentencepiece_tokenizer.h"
#include "core/tokenizer.h"
#include "core/tokenizer_config.h"
#include "launch/commands.h"
#include "launch/hf_source.h"
#include "launch/model_record.h"
#include "launch/moe_metrics.h"
#include "launch/tokenizer_record.h"
#include "models/gpt_hf.h"
#include "models/llama_hf.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

bool is_weights_file(const std::string& name) {
  return name.rfind("model", 0) == 0 && ends_with(name, ".safetensors");
}

// Refuses (InputError naming the file) to replace OUTPUT unless it is absent, empty, or an earlier
// loom export whose every file the new export writes again: the directory is replaced whole, so a
// file left out would be deleted. An earlier export is told by its weights' metadata (source: loom),
// so that a model downloaded from the Hub, whose file names are the same, is never written over.
// WRITTEN: the names the new export writes besides config.json, generation_config.json and weights.
void check_replaceable(const std::string& output, const std::set<std::string>& written) {
  const fs::path target(output);
  std::error_code error;
  if (!fs::exists(fs::symlink_status(target, error))) return;
  if (fs::is_symlink(fs::symlink_status(target)))
    throw InputError("--output '" + output + "' is a symbolic link; give the directory itself");
  if (!fs::is_directory(target)) throw InputError("--output '" + output + "' exists and is not a directory");
  std::vector<std::string> names;
  for (fs::directory_iterator it(target, error), end; !error && it != end; it.increment(error))
    names.push_back(it->path().filename().string());
  if (error) throw InputError("--output '" + output + "' cannot be read: " + error.message());
  if (names.empty()) return;
  bool loom_weights = false;
  for (const auto& name : names) {
    if (!is_weights_file(name)) continue;
    std::string source;
    try {
      const SafetensorsReader reader((target / name).string());
      const auto it = reader.metadata().find("source");
      if (it != reader.metadata().end()) source = it->second;
    } catch (const InputError&) {
    }
    if (source != "loom") {
      throw InputError("--output '" + output + "' holds '" + name +
                       "', weights that no loom export wrote, which an export would replace; choose a new "
                       "or empty directory");
    }
    loom_weights = true;
  }
  for (const auto& name : names) {
    const bool rewritten = name == "config.json" || name == "generation_config.json" ||
                           name == "model.safetensors.index.json" || is_weights_file(name) || written.count(name);
    if (!rewritten || !loom_weights) {
      throw InputError(
          "--output '" + output + "' holds '" + name + "', which " +
          (loom_weights ? "this export does not write and would delete" : "is not part of an earlier loom export") +
          "; choose a new or empty directory, or move the file");
    }
  }
}

// The tokenizer the checkpoint's data was made with (its manifest's record), to go beside the
// weights so that transformers' AutoTokenizer and `loom generate DIR` find it: FILES, a Hugging Face
// tokenizer.json with its tokenizer_config.json and special_tokens_map.json, or a SentencePiece
// model as tokenizer.model; none (with a warning) when the record names none, or a file gone or
// changed since training: the weights are exported all the same. CONFIG, the tokenizer_config.json
// to write instead of copying one (null: none), says what AutoTokenizer cannot find out alone: for
// a SentencePiece model its class (SentencePieceBackend, below) and
// add_bos_token as the data had it, so that `loom generate DIR` and transformers start prompts as
// training did (a tokenizer.json's post-processor decides that by itself, in transformers 5 and in
// loom); for a tokenizer.json with none beside it, its BOS and EOS. BOS_ID and EOS_ID are the
// tokenizer's (-1: none; the byte tokenizer's EOS is 256), for a config.json that names none.
struct ExportTokenizer {
  std::map<std::string, fs::path> files;
  nlohmann::json config;
  nlohmann::ordered_json tokenizer_json;  // written instead of copying the file (null: copied)
  bool known = false;                     // whether the ids below are the data's tokenizer's
  int64_t bos_id = -1, eos_id = -1;
};

// FILE's tokenizer.json with BOS (id BOS_ID, text BOS) first in every encoding: for data whose
// documents start with it (--add-bos) where the file's post-processor adds none (GPT-2's). A
// tokenizer.json's post-processor is all transformers 5 reads for that (tokenizer_config.json's
// add_bos_token changes no id), and loom reads it alike (core/hf_bpe_tokenizer.cpp).
nlohmann::ordered_json with_bos_first(const std::string& file, int64_t bos_id, const std::string& bos) {
  std::ifstream in(file);
  auto json = nlohmann::ordered_json::parse(in);
  using J = nlohmann::ordered_json;
  const auto special = [&](int type_id) {
    return J::object({{"SpecialToken", J::object({{"id", bos}, {"type_id", type_id}})}});
  };
  const auto sequence = [](const char* id, int type_id) {
    return J::object({{"Sequence", J::object({{"id", id}, {"type_id", type_id}})}});
  };
  J bos_first = J::object();
  bos_first["type"] = "TemplateProcessing";
  bos_first["single"] = J::array({special(0), sequence("A", 0)});
  bos_first["pair"] = J::array({special(0), sequence("A", 0), special(1), sequence("B", 1)});
  bos_first["special_tokens"] =
      J::object({{bos, J::object({{"id", bos}, {"ids", J::array({bos_id})}, {"tokens", J::array({bos})}})}});
  J& processor = json["post_processor"];
  if (processor.is_null()) {
    processor = bos_first;
  } else {  // (GPT-2's ByteLevel: it moves offsets, not ids)
    J sequence_of = J::object();
    sequence_of["type"] = "Sequence";
    sequence_of["processors"] = J::array({processor, bos_first});
    processor = sequence_of;
  }
  return json;
}

ExportTokenizer export_tokenizer(const nlohmann::json& manifest, const std::string& checkpoint) {
  ExportTokenizer out;
  const auto record = manifest.value("tokenizer", nlohmann::json());
  const std::string kind = record.is_object() ? record.value("kind", std::string()) : std::string();
  if (kind == "byte") {
    const ByteTokenizer bytes;
    out.known = true, out.bos_id = bytes.bos_id(), out.eos_id = bytes.eos_id();
  }
  if (kind != "hf-bpe" && kind != "sentencepiece") return out;
  std::string file;
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    file = tokenizer_of_record(record, checkpoint);
    tokenizer = load_tokenizer(file);
  } catch (const InputError& e) {
    log::warn("loom export: the export has no tokenizer: {}", e.what());
    return out;
  }
  out.known = true, out.bos_id = tokenizer->bos_id(), out.eos_id = tokenizer->eos_id();
  out.files[kind == "sentencepiece" ? "tokenizer.model" : "tokenizer.json"] = file;
  for (const char* beside : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path path = fs::path(file).parent_path() / beside;
    if (std::error_code error; fs::exists(path, error)) out.files[beside] = path;
  }
  const bool config_beside = out.files.count("tokenizer_config.json") > 0;
  if (kind == "sentencepiece") {
    try {
      out.config = tokenizer_config_beside(file);
    } catch (const InputError& e) {  // an unreadable one is not carried; what loom knows still is
      log::warn("loom export: {}; the export's tokenizer_config.json has loom's settings alone", e.what());
    }
    if (!out.config.is_object()) out.config = nlohmann::json::object();
    const bool add_bos = record.contains("add_bos") && record["add_bos"].is_boolean() ? record["add_bos"].get<bool>()
                                                                                      : tokenizer->adds_bos();
    if (record.contains("add_bos") && record["add_bos"].is_boolean()) out.config["add_bos_token"] = add_bos;
    // Without a class AutoTokenizer builds a generic one that drops the leading "▁" of every word,
    // and LlamaTokenizer rebuilds a unigram model as BPE: transformers 5's SentencePieceBackend runs
    // the model itself, as loom does, BOS first as the data had it, special tokens' text as text.
    if (!out.config.contains("tokenizer_class")) {
      out.config["tokenizer_class"] = "SentencePieceBackend";
      out.config["special_tokens_pattern"] = add_bos ? "bos" : "none";
      out.config["split_special_tokens"] = true;
      if (out.bos_id >= 0) out.config["bos_token"] = tokenizer->special_token_text(out.bos_id);
      if (out.eos_id >= 0) out.config["eos_token"] = tokenizer->special_token_text(out.eos_id);
      // (SentencePieceBackend reads it for pieces outside the vocabulary: without it some prompts fail.)
      if (const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(tokenizer.get()); sp && !sp->unk_piece().empty())
        out.config["unk_token"] = sp->unk_piece();
    }
    out.files.erase("tokenizer_config.json");
  } else if (record.contains("add_bos") && record["add_bos"].is_boolean()) {
    const bool data_bos = record["add_bos"].get<bool>();
    if (data_bos && !tokenizer->adds_bos() && out.bos_id >= 0) {
      out.tokenizer_json = with_bos_first(file, out.bos_id, tokenizer->special_token_text(out.bos_id));
      out.files.erase("tokenizer.json");
    } else if (!data_bos && tokenizer->adds_bos()) {
      log::warn(
          "loom export: the data's documents had no BOS (loom prepare without --add-bos), but {}'s post-processor "
          "adds one: prompts through the export start with BOS, where training's documents did not",
          file);
    }
  }
  if (kind == "hf-bpe" && !config_beside) {
    const auto token = [&](int64_t id) {
      return id < 0 ? nlohmann::json() : nlohmann::json(tokenizer->special_token_text(id));
    };
    out.config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                  {"bos_token", token(out.bos_id)},
                  {"eos_token", token(out.eos_id)}};
  }
  return out;
}

// CONFIG (config.json) of a model trained from scratch names no special ids, and transformers then
// takes its class's (Llama's EOS 2, GPT-2's 50256, which may be no token of this vocabulary): the
// data's tokenizer's, where it is known. A source model's own (fine-tuning) are kept.
void name_special_ids(nlohmann::ordered_json& config, const ExportTokenizer& tokenizer) {
  if (!tokenizer.known || config.contains("eos_token_id")) return;
  const auto id = [](int64_t id) { return id < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(id); };
  config["bos_token_id"] = id(tokenizer.bos_id);
  config["eos_token_id"] = id(tokenizer.eos_id);
}

// DIR/NAME holding TEXT and a newline; an InputError naming it when it cannot be written.
void write_json(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream out(fs::path(dir) / name);
  out << text << "\n";
  if (!out.flush()) throw InputError("cannot write '" + dir + "/" + name + "'");
}

// Writes the directory beside OUTPUT, then puts it in OUTPUT's place by renames,
// so that OUTPUT is never half written: an interrupted export leaves the old one.
void publish_directory(const std::string& output, const std::function<void(const std::string&)>& write) {
  const fs::path target = fs::absolute(output).lexically_normal();
  // The renames below would replace a link, not fill what it points to (or fail on a dangling one).
  if (fs::is_symlink(target.has_filename() ? target : target.parent_path()))
    throw InputError("--output '" + output + "' is a symbolic link; give the directory itself");
  const fs::path parent = target.has_filename() ? target.parent_path() : target.parent_path().parent_path();
  const std::string name = (target.has_filename() ? target : target.parent_path()).filename().string();
  std::error_code error;
  fs::create_directories(parent, error);
  // Names of this process's own, so that nothing of the user's beside OUTPUT is removed (a folder
  // named .NAME.tmp may be anyone's); an export killed midway leaves them for the user to see.
  const std::string own = "." + name + ".export-" + std::to_string(::getpid());
  const fs::path temporary = parent / (own + ".tmp"), old = parent / (own + ".old");
  if (fs::exists(fs::symlink_status(temporary)) || fs::exists(fs::symlink_status(old)))
    throw InputError("--output: '" + temporary.string() + "' or its .old exists; remove it and export again");
  if (!fs::create_directory(temporary, error) || error)
    throw InputError("--output: cannot create '" + temporary.string() + "': " + error.message());
  try {
    write(temporary.string());
  } catch (...) {
    fs::remove_all(temporary, error);
    throw;
  }
  if (fs::exists(target)) fs::rename(target, old);
  fs::rename(temporary, parent / name);
  fs::remove_all(old);
}

// The family --format hf writes: the source's (GPT-2 or the Llama family), else what the model's
// positions say (learned: GPT-2).
std::string family_of(const Config& config, const nlohmann::json& source) {
  if (source.is_object() && source.contains("config")) {
    const auto& architectures = source.at("config").value("architectures", nlohmann::json::array());
    if (architectures.is_array() && !architectures.empty() && architectures[0] == "GPT2LMHeadModel") return "hf-gpt2";
    if (source.at("config").value("model_type", "") == "gpt2") return "hf-gpt2";
    return "hf-llama";
  }
  return config.model.position == PositionKind::learned ? "hf-gpt2" : "hf-llama";
}

}  // namespace

static int export_checkpoint_unguarded(const ExportArgs& args);

// What export reads is the checkpoint's: a LibTorch check that fails on it (a manifest whose model
// record or tensors were edited to disagree, a checksum made to match) is the checkpoint's fault,
// said naming it with exit 2 rather than as loom's own failure.
int export_checkpoint(const ExportArgs& args) {
  try {
    return export_checkpoint_unguarded(args);
  } catch (const c10::Error& e) {
    throw InputError("loom export: " + args.checkpoint + " cannot be exported: " + e.what_without_backtrace());
  } catch (const nlohmann::json::exception& e) {
    throw InputError("loom export: " + args.checkpoint + "/manifest.json is malformed: " + e.what());
  }
}

static int export_checkpoint_unguarded(const ExportArgs& args) {
  if (args.format != "hf" && args.format != "hf-gpt2" && args.format != "hf-llama")
    throw InputError("--format '" + args.format + "' is not known; use hf, hf-llama or hf-gpt2");
  if (args.output.empty()) throw InputError("--output is empty: give the directory to write");
  const int64_t max_shard = parse_byte_size(args.max_shard_size, "--max-shard-size");
  const std::string problem = verify_checkpoint(args.checkpoint);
  if (!problem.empty()) throw InputError("loom export: " + problem);
  const auto manifest = read_manifest(args.checkpoint);
  Config config = config_of_model_record(manifest.at("model"), args.checkpoint + "/manifest.json");
  if (config.model.moe.enabled()) {
    // The router's settings go into config.json (num_experts_per_tok, ...): without them it would
    // describe another model.
    if (!manifest.contains("moe_router") && config.model.activation == Activation::swiglu) {
      throw InputError("loom export: " + args.checkpoint +
                       " is a Mixture-of-Experts checkpoint saved before loom recorded the router's settings "
                       "(manifest.json has no moe_router); resume it with this loom and export a newer checkpoint");
    }
    // An older GELU MoE has none either: the format refuses it below, naming why.
    if (manifest.contains("moe_router"))
      apply_moe_router_record(config, manifest.at("moe_router"), args.checkpoint + "/manifest.json");
  }
  const nlohmann::json source = manifest.value("hf_source", nlohmann::json());
  const std::string family = args.format == "hf" ? family_of(config, source) : args.format;
  // Refuses, naming the key, a model the format cannot hold, before any tensor is read.
  auto hf_config = exported_hf_config(hf_config_of(config, family), source, args.format == "hf");
  const auto tokenizer = export_tokenizer(manifest, args.checkpoint);
  name_special_ids(hf_config, tokenizer);
  const auto generation_config = exported_generation_config(hf_config, source);

  std::map<std::string, torch::Tensor> tensors;
  const std::string prefix = "model/";
  for (const auto& [name, info] : manifest.at("tensors").items()) {
    if (name.rfind(prefix, 0) != 0) continue;
    tensors[name.substr(prefix.size())] = *read_tensor_slice(args.checkpoint, manifest, name, -1, 0, 0);
  }
  // The routers' expert biases (DeepSeek-V3's e_score_correction_bias) are the trainer's state, kept in
  // the manifest, not parameters: zero where the checkpoint has none.
  if (config.model.moe.enabled() && config.model.arch == ModelArch::llama) {
    const auto biases = manifest.value("expert_bias", std::vector<std::vector<double>>{});
    const auto layers = moe_layers(config);
    for (size_t i = 0; i < layers.size(); ++i) {
      auto& bias = tensors["h." + std::to_string(layers[i]) + ".moe.expert_bias"];
      bias = i < biases.size() ? torch::tensor(biases[i], torch::kFloat64).to(torch::kFloat32)
                               : torch::zeros({config.model.moe.num_experts});
    }
  }
  const auto& m = config.model;
  const auto hf = family == "hf-llama" ? models::llama_to_hf(tensors, config)
                                       : models::gpt_to_hf(tensors, m.num_layers, m.num_heads);
  // Nothing here depends on the step or the layout: every layout's checkpoint of a model exports the same bytes.
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"source", "loom"}};
  int64_t parameters = 0;
  for (const auto& [name, t] : hf) parameters += t.numel();
  const std::string what = std::to_string(hf.size()) + " tensors, " + std::to_string(parameters) + " parameters, " +
                           hf_config.at("architectures")[0].get<std::string>() + ", from step " +
                           manifest.at("step").dump();
  if (family == "hf-gpt2" && ends_with(args.output, ".safetensors")) {  // the one-file form of earlier versions
    // A file already there is someone's weights (a downloaded model.safetensors, an earlier export):
    // never replaced.
    if (fs::exists(fs::symlink_status(args.output)))
      throw InputError("--output '" + args.output + "' exists, and an export would replace it; choose a new path");
    write_safetensors(args.output, hf, metadata);
    std::cout << "wrote " << args.output << ": " << what << "\n";
    return 0;
  }
  std::vector<std::string> files;
  std::set<std::string> written;
  for (const auto& [name, from] : tokenizer.files) written.insert(name);
  if (!tokenizer.config.is_null()) written.insert("tokenizer_config.json");
  if (!tokenizer.tokenizer_json.is_null()) written.insert("tokenizer.json");
  check_replaceable(args.output, written);
  publish_directory(args.output, [&](const std::string& dir) {
    for (const auto& [name, from] : tokenizer.files) fs::copy_file(from, fs::path(dir) / name);
    if (!tokenizer.config.is_null()) write_json(dir, "tokenizer_config.json", tokenizer.config.dump(2));
    if (!tokenizer.tokenizer_json.is_null()) write_json(dir, "tokenizer.json", tokenizer.tokenizer_json.dump(2));
    write_json(dir, "config.json", hf_config.dump(2));
    write_json(dir, "generation_config.json", generation_config.dump(2));
    files = write_hf_weights(dir, hf, max_shard, metadata);
  });
  const std::string weights =
      files.size() == 1 ? files[0] : std::to_string(files.size() - 1) + " shards and " + files.back();
  std::cout << "wrote " << args.output << " (config.json, " << weights
            << (tokenizer.files.empty() && tokenizer.tokenizer_json.is_null() ? "" : ", the tokenizer") << "): " << what
            << "\n";
  return 0;
}

}  // namespace loom::launch
