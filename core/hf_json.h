// A Hugging Face config.json read key by key for loom's model keys (core/hf_config.h): each value
// checked for its type, each refusal an InputError naming the file and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"

namespace loom {

// Model keys as --set would write them ("model.num_heads", "9").
using HfKeys = std::vector<std::pair<std::string, std::string>>;

// config.json's values, each refusal naming the file and the key.
class HfJson {
 public:
  HfJson(const nlohmann::json& json, const std::string& file) : json_(json), file_(file) {}

  bool has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }
  // Written as null: for most keys transformers then keeps None, not its default.
  bool null(const std::string& key) const { return json_.contains(key) && json_[key].is_null(); }
  const nlohmann::json& at(const std::string& key) const {
    if (!has(key)) throw refused(key, "is missing");
    return json_[key];
  }
  std::string integer(const std::string& key) const { return integer_of_at_least(key, 1, "a positive integer"); }
  std::string integer(const std::string& key, int64_t fallback) const {
    return has(key) ? integer(key) : std::to_string(fallback);
  }
  // A count that may be 0 (shared experts, dense first layers).
  std::string count(const std::string& key, int64_t fallback) const {
    return has(key) ? integer_of_at_least(key, 0, "an integer of at least 0") : std::to_string(fallback);
  }
  std::string number(const nlohmann::json& holder, const std::string& key, const std::string& where) const {
    if (!holder.contains(key) || !holder[key].is_number()) throw refused(where + key, "must be a number");
    return holder[key].dump();
  }
  std::string number(const std::string& key, double fallback) const {
    if (!has(key)) return nlohmann::json(fallback).dump();
    return number(json_, key, "");
  }
  // An explicit null is false: transformers passes it to the config as None, and its models test
  // these flags as Python truth values (`if config.norm_topk_prob:`).
  bool boolean(const std::string& key, bool fallback) const {
    if (json_.contains(key) && json_[key].is_null()) return false;
    if (!has(key)) return fallback;
    if (!json_[key].is_boolean()) throw refused(key, "must be true or false, not " + json_[key].dump());
    return json_[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!json_[key].is_string()) throw refused(key, "must be a string, not " + json_[key].dump());
    return json_[key].get<std::string>();
  }
  InputError refused(const std::string& key, const std::string& why) const {
    return InputError(file_ + ": \"" + key + "\" " + why);
  }

 private:
  std::string integer_of_at_least(const std::string& key, int64_t least, const std::string& what) const {
    const auto& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < least) throw refused(key, "must be " + what + ", not " + v.dump());
    return std::to_string(v.get<int64_t>());
  }

  const nlohmann::json& json_;
  const std::string& file_;
};

}  // namespace loom
