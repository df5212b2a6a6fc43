#include "core/tokenizer_config.h"

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/regular_file.h"

namespace loom {

nlohmann::json read_tokenizer_file(const std::string& path) {
  require_regular_file(path, "tokenizer file");
  std::ifstream in(path);
  if (!in) throw InputError("cannot read tokenizer file '" + path + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("tokenizer file '" + path + "' is not valid JSON: " + e.what());
  }
}

nlohmann::json tokenizer_config_beside(const std::string& tokenizer_file) {
  const auto path = std::filesystem::path(tokenizer_file).parent_path() / "tokenizer_config.json";
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return nlohmann::json::object();
  const auto config = read_tokenizer_file(path.string());
  return config.is_object() ? config : nlohmann::json::object();
}

nlohmann::json special_tokens_beside(const std::string& tokenizer_file) {
  nlohmann::json config = tokenizer_config_beside(tokenizer_file);
  const auto path = std::filesystem::path(tokenizer_file).parent_path() / "special_tokens_map.json";
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return config;
  const auto map = read_tokenizer_file(path.string());
  if (!map.is_object()) return config;
  for (const auto& [key, value] : map.items()) {
    if (value.is_string() || value.is_object()) config[key] = value;
  }
  return config;
}

std::optional<bool> add_bos_token(const nlohmann::json& config) {
  if (config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
    return config["add_bos_token"].get<bool>();
  return std::nullopt;
}

}  // namespace loom
