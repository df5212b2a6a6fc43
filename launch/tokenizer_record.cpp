#include "launch/tokenizer_record.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "core/crc32c.h"
#include "core/data_blend.h"
#include "core/dataset_sidecar.h"
#include "core/errors.h"

namespace loom::launch {
namespace fs = std::filesystem;
namespace {

std::optional<uint32_t> file_crc(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return crc32c(bytes);
}

// A tokenizer.json named by its directory is the file inside it.
fs::path tokenizer_file(const std::string& source) {
  fs::path path(source);
  if (fs::is_directory(path)) path /= "tokenizer.json";
  return fs::absolute(path).lexically_normal();
}

nlohmann::json file_record(const std::string& kind, const fs::path& file, int64_t vocab_size) {
  const auto crc = file_crc(file);
  if (!crc) return nullptr;  // the file is not where it was named: nothing to promise
  return {{"kind", kind}, {"file", file.string()}, {"crc32c", *crc}, {"vocab_size", vocab_size}};
}

}  // namespace

nlohmann::json tokenizer_record(const Config& config) {
  const auto blend = parse_blend(config.data.path, "data.path");
  if (!blend.empty()) {
    const auto sidecar = read_sidecar(blend.front().prefix);
    if (!sidecar || sidecar->tokenizer.empty()) return nullptr;
    auto record = sidecar->tokenizer == "byte"
                      ? nlohmann::json{{"kind", "byte"}, {"vocab_size", sidecar->vocab_size}}
                      : file_record(sidecar->tokenizer, tokenizer_file(sidecar->tokenizer_source), sidecar->vocab_size);
    if (!record.is_null() && sidecar->add_bos) record["add_bos"] = *sidecar->add_bos;
    return record;
  }
  const std::string& dir = config.model.init_from;
  if (dir.empty() || !fs::is_directory(dir)) return nullptr;
  // The model's vocabulary may be padded past the tokenizer's: no vocab_size is promised here.
  if (fs::exists(fs::path(dir) / "tokenizer.json")) return file_record("hf-bpe", tokenizer_file(dir), 0);
  if (fs::exists(fs::path(dir) / "tokenizer.model"))
    return file_record("sentencepiece", fs::absolute(fs::path(dir) / "tokenizer.model"), 0);
  return nullptr;
}

std::string tokenizer_of_record(const nlohmann::json& record, const std::string& source) {
  try {
    const std::string kind = record.at("kind").get<std::string>();
    if (kind == "byte") return "byte";
    const std::string file = record.at("file").get<std::string>();
    const auto crc = file_crc(file);
    if (!crc) {
      throw InputError(source + " was trained on data tokenized by " + kind + " '" + file +
                       "', which is no longer there; give that tokenizer with --tokenizer");
    }
    if (*crc != record.at("crc32c").get<uint32_t>()) {
      throw InputError(source + " was trained on data tokenized by " + kind + " '" + file +
                       "', which has changed since (its CRC-32C differs); give the tokenizer it was trained with "
                       "with --tokenizer");
    }
    return file;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(source + ": the manifest's tokenizer record " + record.dump() + " cannot be read: " + e.what());
  }
}

}  // namespace loom::launch
