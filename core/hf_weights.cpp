#include "core/hf_weights.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/errors.h"
#include "core/regular_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

}  // namespace

HfWeights::HfWeights(const std::string& dir) : dir_(dir) {
  const fs::path single = fs::path(dir) / kSingleFile, index = fs::path(dir) / kIndexFile;
  // transformers looks for the single file first, then the index.
  require_regular_file(single.string(), "Hugging Face weights");  // (a symlink loop, a FIFO)
  std::error_code error;
  if (fs::exists(single, error)) {
    layout_ = kSingleFile;
    auto reader = std::make_unique<SafetensorsReader>(single.string());
    for (const auto& name : reader->names()) file_of_[name] = reader.get();
    files_[kSingleFile] = std::move(reader);
    return;
  }
  if (!fs::exists(index, error)) {
    throw InputError("Hugging Face model directory '" + dir + "' has neither " + kSingleFile + " nor " + kIndexFile +
                     " (loom reads safetensors weights, not pytorch_model.bin)");
  }
  layout_ = kIndexFile;
  nlohmann::json json;
  require_regular_file(index.string(), "safetensors index");
  try {
    std::ifstream in(index);
    json = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError("'" + index.string() + "' is not valid JSON: " + e.what());
  }
  if (!json.contains("weight_map") || !json["weight_map"].is_object())
    throw InputError("'" + index.string() + "' has no \"weight_map\" object");
  for (const auto& [name, file] : json["weight_map"].items()) {
    if (!file.is_string())
      throw InputError("'" + index.string() + "': the weight_map entry of '" + name + "' is not a file name");
    const std::string shard = file.get<std::string>();
    auto& reader = files_[shard];
    if (!reader) reader = std::make_unique<SafetensorsReader>((fs::path(dir) / shard).string());
    if (!reader->contains(name)) {
      throw InputError("'" + index.string() + "' puts tensor '" + name + "' in " + shard +
                       ", which has no such tensor");
    }
    file_of_[name] = reader.get();
  }
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : file_of_) out.push_back(name);
  return out;
}

const std::string& HfWeights::file_of(const std::string& name) const {
  auto it = file_of_.find(name);
  if (it == file_of_.end()) {
    // transformers 5 can save a mixture of experts' experts fused, a tensor per layer
    // (save_pretrained(..., save_original_format=False)), which loom does not read.
    std::string fused;
    for (const auto& [stored, file] : file_of_) {
      if (stored.find(".experts.gate_up_proj") != std::string::npos) {
        fused = "; it stores each layer's experts fused ('" + stored +
                "'), transformers 5's own layout, where loom reads one tensor per expert, the layout "
                "save_pretrained writes by default (save_original_format=True): load it with transformers and save "
                "it again that way";
        break;
      }
    }
    throw InputError("Hugging Face model directory '" + dir_ + "' has no tensor '" + name + "' (" + layout_ +
                     " does not list it)" + fused);
  }
  return it->second->path();
}

const std::vector<int64_t>& HfWeights::shape(const std::string& name) const {
  file_of(name);  // names the directory when the tensor is missing
  return file_of_.at(name)->shape(name);
}

torch::Tensor HfWeights::read(const std::string& name) const {
  file_of(name);  // names the directory when the tensor is missing
  return file_of_.at(name)->read(name);
}

torch::Tensor HfWeights::read(const std::string& name, const std::vector<int64_t>& shape) const {
  const auto& file = file_of(name);
  const auto& stored = file_of_.at(name)->shape(name);
  if (stored != shape) {
    throw InputError("tensor '" + name + "' in '" + file + "' has shape " + shape_text(stored) + " where " +
                     shape_text(shape) + " is needed (does config.json describe these weights?)");
  }
  return file_of_.at(name)->read(name);
}

std::vector<std::string> write_hf_weights(const std::string& dir,
                                          const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                          int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  // transformers' rule: a shard takes tensors in order until the next would take it past the limit.
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& entry : tensors) {
    const int64_t bytes = entry.second.numel() * 4;
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(entry);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / kSingleFile).string(), shards[0], metadata);
    return {kSingleFile};
  }
  std::vector<std::string> files;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(dir) / name).string(), shards[i], metadata);
    for (const auto& [tensor, value] : shards[i]) weight_map[tensor] = name;
    files.push_back(name);
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream out(fs::path(dir) / kIndexFile);
  out << index.dump(2) << "\n";
  if (!out.flush()) throw InputError("cannot write '" + (fs::path(dir) / kIndexFile).string() + "'");
  files.push_back(kIndexFile);
  return files;
}

int64_t parse_byte_size(const std::string& text, const std::string& what) {
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},         {"KB", 1e3},      {"MB", 1e6},      {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1099511627776.0}};
  std::string upper;
  for (char c : unit) upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  char* end = nullptr;
  const double value = number.empty() ? 0 : std::strtod(number.c_str(), &end);
  const auto it = units.find(upper);
  if (number.empty() || *end != '\0' || it == units.end() || value * it->second < 1) {
    throw InputError(what + " '" + text +
                     "' is not a size: write bytes, or a number with KB, MB, GB (10^3, 10^6, 10^9) "
                     "or KiB, MiB, GiB (2^10, 2^20, 2^30), like 5GB");
  }
  // Past 2^62 (4.6 EB) llround overflows (to a negative number, read as one shard per tensor).
  if (!(value * it->second <= 4611686018427387904.0))
    throw InputError(what + " '" + text + "' is larger than 4 EiB (2^62 bytes); no shard gets that big");
  return static_cast<int64_t>(std::llround(value * it->second));
}

}  // namespace loom
