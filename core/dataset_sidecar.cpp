#include "core/dataset_sidecar.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/errors.h"
#include "core/regular_file.h"

namespace loom {
namespace {

constexpr const char* kFormat = "loom-dataset-1";  // the "format" of every sidecar loom prepare writes

}  // namespace

std::string sidecar_path(const std::string& prefix) {
  return prefix + ".json";
}

bool is_dataset_sidecar(const std::string& prefix) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(sidecar_path(prefix), error)) return false;  // (a FIFO would wait)
  std::ifstream in(sidecar_path(prefix));
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return json.is_object() && json.contains("format") && json["format"] == kFormat;
}

void write_sidecar(const std::string& prefix, const DatasetSidecar& s) {
  nlohmann::json json{{"format", kFormat},
                      {"tokenizer", s.tokenizer},
                      {"tokenizer_source", s.tokenizer_source},
                      {"vocab_size", s.vocab_size},
                      {"bos_id", s.bos_id},
                      {"eos_id", s.eos_id},
                      {"max_token_id", s.max_token_id},
                      {"documents", s.documents},
                      {"tokens", s.tokens},
                      {"dtype", s.dtype}};
  if (s.tokenizer_crc32c) json["tokenizer_crc32c"] = *s.tokenizer_crc32c;
  if (s.add_bos) json["add_bos"] = *s.add_bos;
  if (s.append_eod) json["append_eod"] = *s.append_eod;
  const std::string path = sidecar_path(prefix);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << json.dump(2) << "\n";
    out.flush();
    if (!out) throw InputError("cannot write '" + tmp + "'");
  }
  std::filesystem::rename(tmp, path);
}

std::optional<DatasetSidecar> read_sidecar(const std::string& prefix) {
  const std::string path = sidecar_path(prefix);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  if (std::filesystem::is_directory(path, error)) {
    throw InputError("dataset sidecar '" + path + "' is a directory, where loom prepare writes a file");
  }
  require_regular_file(path, "dataset sidecar");
  std::ifstream in(path);
  if (!in) throw InputError("cannot read dataset sidecar '" + path + "'");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("dataset sidecar '" + path + "' is not valid JSON: " + e.what());
  }
  if (!json.is_object()) throw InputError("dataset sidecar '" + path + "' is not a JSON object");
  auto integer = [&](const char* key, bool required) -> int64_t {
    if (!json.contains(key)) {
      if (required) throw InputError("dataset sidecar '" + path + "' has no key '" + key + "'");
      return -1;
    }
    if (!json[key].is_number_integer())
      throw InputError("dataset sidecar '" + path + "': key '" + key + "' is not an integer");
    return json[key].get<int64_t>();
  };
  auto text = [&](const char* key) -> std::string {
    if (!json.contains(key)) return "";
    if (!json[key].is_string()) throw InputError("dataset sidecar '" + path + "': key '" + key + "' is not a string");
    return json[key].get<std::string>();
  };
  DatasetSidecar s;
  s.tokenizer = text("tokenizer");
  s.tokenizer_source = text("tokenizer_source");
  s.vocab_size = integer("vocab_size", true);
  if (s.vocab_size <= 0) throw InputError("dataset sidecar '" + path + "': vocab_size must be positive");
  s.bos_id = integer("bos_id", false);
  s.eos_id = integer("eos_id", false);
  s.max_token_id = integer("max_token_id", false);
  s.documents = integer("documents", false);
  s.tokens = integer("tokens", false);
  s.dtype = text("dtype");
  if (json.contains("tokenizer_crc32c")) {
    const auto& crc = json["tokenizer_crc32c"];
    if (!crc.is_number_unsigned() || crc.get<uint64_t>() > UINT32_MAX)
      throw InputError("dataset sidecar '" + path + "': key 'tokenizer_crc32c' is not a CRC-32C (0 to 4294967295)");
    s.tokenizer_crc32c = crc.get<uint32_t>();
  }
  for (auto [key, value] : {std::pair{"add_bos", &s.add_bos}, std::pair{"append_eod", &s.append_eod}}) {
    if (!json.contains(key)) continue;
    if (!json[key].is_boolean())
      throw InputError("dataset sidecar '" + path + "': key '" + key + "' is not true or false");
    *value = json[key].get<bool>();
  }
  return s;
}

}  // namespace loom
