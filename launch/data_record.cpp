#include "launch/data_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/crc32c.h"
#include "core/data_blend.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;

// data.path as the record lists it: "W PREFIX" pairs, the weights normalised.
std::string blend_text(const nlohmann::json& path) {
  if (path.empty()) return "the built-in corpus";
  std::string text;
  for (const auto& dataset : path) {
    if (!text.empty()) text += " ";
    if (path.size() > 1) text += fmt::format("{:.6g} ", dataset.value("weight", 1.0));
    text += dataset.value("prefix", std::string());
  }
  return text;
}

bool shuffled(const nlohmann::json& record) {
  return record.value("order", std::string()) == "shuffled";
}

// The same dataset at the same place in the blend with the same weight: by its files where both
// records have them, else (a record without) by its path.
bool same_dataset(const nlohmann::json& saved, const nlohmann::json& now) {
  if (std::abs(saved.value("weight", 1.0) - now.value("weight", 1.0)) > 1e-12) return false;
  if (saved.contains("content") && now.contains("content") && saved["content"] != now["content"]) return false;
  if (saved.contains("fingerprint") && now.contains("fingerprint")) return saved["fingerprint"] == now["fingerprint"];
  return saved.value("prefix", std::string()) == now.value("prefix", std::string());
}

}  // namespace

std::string dataset_fingerprint(const std::string& prefix) {
  std::string out;
  for (const char* suffix : {".bin", ".idx"}) {
    std::error_code error;
    const auto size = fs::file_size(prefix + suffix, error);
    out += std::string(out.empty() ? "" : ", ") + suffix + " " + (error ? "missing" : std::to_string(size) + " bytes");
  }
  std::ifstream in(prefix + ".idx", std::ios::binary);
  if (!in) return out;
  std::vector<char> buffer(1 << 20);
  uint32_t crc = 0;
  in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  crc = crc32c(buffer.data(), static_cast<size_t>(in.gcount()), crc);
  in.clear();
  in.seekg(-static_cast<std::streamoff>(buffer.size()), std::ios::end);
  if (!in) in.clear(), in.seekg(0);
  in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  crc = crc32c(buffer.data(), static_cast<size_t>(in.gcount()), crc);
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  return out + ", index crc32c " + hex;
}

std::string dataset_content_fingerprint(const std::string& prefix, int64_t budget) {
  constexpr int64_t kBlock = 64 << 10;
  // Per file: the index whole while it fits the budget, else (and the tokens) blocks spread evenly.
  const int64_t blocks = std::clamp<int64_t>(budget / 2 / kBlock, 2, 64);
  const int64_t whole_up_to = std::min<int64_t>(budget / 2, 64 << 20);
  std::string out;
  for (const char* suffix : {".bin", ".idx"}) {
    std::ifstream in(prefix + suffix, std::ios::binary);
    std::error_code error;
    const auto size = static_cast<int64_t>(fs::file_size(prefix + suffix, error));
    if (!in || error) return "";  // missing: the sizes' fingerprint says so
    // Whole (the index up to WHOLE_UP_TO, anything of BLOCKS blocks or less), else BLOCKS blocks evenly spread, the
    // last at the end.
    const bool whole = size <= kBlock * blocks || (std::string(suffix) == ".idx" && size <= whole_up_to);
    std::vector<char> buffer(static_cast<size_t>(kBlock));
    uint32_t crc = 0;
    for (int64_t i = 0, at = 0; whole ? at < size : i < blocks; ++i) {
      if (!whole) at = (size - kBlock) * i / (blocks - 1);
      in.seekg(at);
      in.read(buffer.data(), kBlock);
      const auto got = in.gcount();
      if (got <= 0) break;
      crc = crc32c(buffer.data(), static_cast<size_t>(got), crc);
      in.clear();
      at += got;
    }
    out += fmt::format("{}{} {:08x}", out.empty() ? "" : ", ", suffix, crc);
  }
  return out;
}

nlohmann::json data_record(const Config& config) {
  nlohmann::json path = nlohmann::json::array();
  const auto blend = parse_blend(config.data.path, "data.path");
  // Rank 0 reads it while the others wait in the save's collectives: 256 MiB at most over the blend.
  const int64_t budget =
      std::max<int64_t>((int64_t{256} << 20) / std::max<int64_t>(1, static_cast<int64_t>(blend.size())), 256 << 10);
  for (const auto& component : blend) {
    path.push_back({{"prefix", fs::absolute(component.prefix).lexically_normal().string()},
                    {"weight", component.weight},
                    {"fingerprint", dataset_fingerprint(component.prefix)},
                    {"content", dataset_content_fingerprint(component.prefix, budget)}});
  }
  const DataSplit split = config.data.split.empty() ? DataSplit{} : parse_split(config.data.split, "data.split");
  return {{"path", path},
          {"split", config.data.split},
          {"split_fractions", {split.train, split.valid, split.test}},
          {"order", to_string(config.data.order)},
          {"seed", config.train.seed}};
}

std::string data_change(const nlohmann::json& manifest, const nlohmann::json& now) {
  if (!manifest.contains("data")) return "";
  const auto& saved = manifest.at("data");
  std::vector<std::string> differences;
  const auto saved_path = saved.value("path", nlohmann::json::array());
  const auto now_path = now.value("path", nlohmann::json::array());
  bool same_blend = saved_path.size() == now_path.size();
  for (size_t i = 0; same_blend && i < saved_path.size(); ++i) same_blend = same_dataset(saved_path[i], now_path[i]);
  if (!same_blend) {
    differences.push_back("data.path was '" + blend_text(saved_path) + "' and is '" + blend_text(now_path) + "'" +
                          (blend_text(saved_path) == blend_text(now_path) ? " (its files have changed since)" : ""));
  }
  const auto fractions = [](const nlohmann::json& record) {
    return record.value("split_fractions", std::vector<double>{1.0, 0.0, 0.0});
  };
  const auto before = fractions(saved), after = fractions(now);
  bool same_split = before.size() == after.size();
  for (size_t i = 0; same_split && i < before.size(); ++i) same_split = std::abs(before[i] - after[i]) < 1e-12;
  if (!same_split) {
    differences.push_back("data.split was '" + saved.value("split", std::string()) + "' and is '" +
                          now.value("split", std::string()) + "'");
  }
  if (saved.value("order", std::string()) != now.value("order", std::string())) {
    differences.push_back("data.order was " + saved.value("order", std::string()) + " and is " +
                          now.value("order", std::string()));
  }
  // The built-in corpus is drawn from train.seed (core/training_data.h): another seed, other text.
  const bool generated = saved_path.empty() && now_path.empty();
  if ((shuffled(saved) || shuffled(now) || generated) &&
      saved.value("seed", int64_t{0}) != now.value("seed", int64_t{0})) {
    differences.push_back(fmt::format("train.seed (the {}) was {} and is {}",
                                      generated ? "built-in corpus's" : "shuffle's", saved.value("seed", int64_t{0}),
                                      now.value("seed", int64_t{0})));
  }
  std::string joined;
  for (const auto& d : differences) joined += (joined.empty() ? "" : "; ") + d;
  return joined;
}

}  // namespace loom::launch
