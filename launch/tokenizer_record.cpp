#include "launch/tokenizer_record.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "core/crc32c.h"
#include "core/data_blend.h"
#include "core/dataset_sidecar.h"
#include "core/errors.h"
#include "core/logging.h"

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

// model.init_from's tokenizer.json or tokenizer.model; null when it has neither. The model's
// vocabulary may be padded past the tokenizer's: no vocab_size is promised.
nlohmann::json init_from_record(const Config& config) {
  const std::string& dir = config.model.init_from;
  if (dir.empty() || !fs::is_directory(dir)) return nullptr;
  if (fs::exists(fs::path(dir) / "tokenizer.json")) return file_record("hf-bpe", tokenizer_file(dir), 0);
  if (fs::exists(fs::path(dir) / "tokenizer.model"))
    return file_record("sentencepiece", fs::absolute(fs::path(dir) / "tokenizer.model"), 0);
  return nullptr;
}

// The tokenizer SIDECAR (of data.path's dataset PREFIX) names, when its file is still the one that
// made the data; null, said once, when it is gone or changed (the data trains all the same).
nlohmann::json data_record(const DatasetSidecar& sidecar, const std::string& prefix) {
  if (sidecar.tokenizer == "byte") return {{"kind", "byte"}, {"vocab_size", sidecar.vocab_size}};
  const fs::path file = tokenizer_file(sidecar.tokenizer_source);
  const auto crc = file_crc(file);
  const bool relative = fs::path(sidecar.tokenizer_source).is_relative();
  if (!crc || (sidecar.tokenizer_crc32c && *crc != *sidecar.tokenizer_crc32c)) {
    warn0(
        "{}: the {} tokenizer that made this data, '{}'{}, is {}: the checkpoints name no tokenizer, so `loom "
        "generate` will need --tokenizer and `loom export` will write none",
        sidecar_path(prefix), sidecar.tokenizer, sidecar.tokenizer_source,
        relative
            ? " (a relative path, which loom prepare recorded before 2026-12-05: read from here, " + file.string() + ")"
            : std::string(),
        crc ? "another file now (its CRC-32C differs from the one loom prepare recorded)" : "not there");
    return nullptr;
  }
  auto record = file_record(sidecar.tokenizer, file, sidecar.vocab_size);
  if (sidecar.add_bos) record["add_bos"] = *sidecar.add_bos;
  return record;
}

}  // namespace

std::string tokenizer_path(const std::string& source) {
  return tokenizer_file(source).string();
}

std::optional<uint32_t> tokenizer_file_crc(const std::string& source) {
  return file_crc(tokenizer_file(source));
}

nlohmann::json tokenizer_record(const Config& config) {
  const auto blend = parse_blend(config.data.path, "data.path");
  const auto model = init_from_record(config);
  const auto sidecar = blend.empty() ? std::nullopt : read_sidecar(blend.front().prefix);
  // Data made elsewhere (Megatron-LM's tools write no sidecar) for a Hugging Face model: the
  // model's own tokenizer is the one it was made for.
  if (!sidecar || sidecar->tokenizer.empty()) return model;
  auto data = data_record(*sidecar, blend.front().prefix);
  // Another tokenizer's ids mean other tokens to the model: said, not refused (the user may mean it).
  // (Either of a directory's tokenizer files, as Llama 2's ship both, is the model's own.)
  // The model's record holds its preferred file's CRC (tokenizer.json): only the .model beside it is read again.
  const auto model_has = [&](const nlohmann::json& record) {
    const auto crc = record.value("crc32c", uint32_t{0});
    return crc == model.value("crc32c", uint32_t{0}) ||
           file_crc(fs::path(config.model.init_from) / "tokenizer.model") == crc ||
           fs::path(record.value("file", "")).parent_path() == fs::path(model.value("file", "")).parent_path();
  };
  if (!data.is_null() && !model.is_null() && !model_has(data)) {
    const std::string kind = data.value("kind", "");
    warn0(
        "data.path's dataset {} was tokenized by {}, and model.init_from's tokenizer is another file, '{}': if the "
        "data was tokenized for another model, its ids mean other tokens to this one (the checkpoints name the "
        "data's)",
        blend.front().prefix, kind == "byte" ? "the byte tokenizer" : kind + " '" + data.value("file", "") + "'",
        model.value("file", ""));
  }
  return data;
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
