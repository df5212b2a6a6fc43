#include "launch/data_record.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "core/data_blend.h"
#include "core/errors.h"
#include "core/indexed_dataset.h"
#include "core/logging.h"

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

}  // namespace

nlohmann::json data_record(const Config& config) {
  nlohmann::json path = nlohmann::json::array();
  for (const auto& component : parse_blend(config.data.path, "data.path")) {
    const IndexedDataset dataset(component.prefix);
    path.push_back({{"prefix", fs::absolute(component.prefix).lexically_normal().string()},
                    {"weight", component.weight},
                    {"sequences", static_cast<int64_t>(dataset.num_sequences())},
                    {"bin_bytes", static_cast<int64_t>(dataset.bin_bytes())}});
  }
  return {{"path", path},
          {"split", config.data.split},
          {"order", to_string(config.data.order)},
          {"seed", config.train.seed}};
}

std::vector<std::string> data_record_differences(const nlohmann::json& saved, const nlohmann::json& now) {
  std::vector<std::string> differences;
  const auto saved_path = saved.value("path", nlohmann::json::array());
  const auto now_path = now.value("path", nlohmann::json::array());
  bool same_blend = saved_path.size() == now_path.size();
  for (size_t i = 0; same_blend && i < saved_path.size(); ++i) {
    same_blend = saved_path[i].value("prefix", std::string()) == now_path[i].value("prefix", std::string()) &&
                 std::abs(saved_path[i].value("weight", 1.0) - now_path[i].value("weight", 1.0)) < 1e-12;
  }
  if (!same_blend) {
    differences.push_back("data.path was '" + blend_text(saved_path) + "' and is '" + blend_text(now_path) + "'");
  } else {
    for (size_t i = 0; i < saved_path.size(); ++i) {
      const auto& before = saved_path[i];
      const auto& after = now_path[i];
      if (before.value("sequences", int64_t{0}) != after.value("sequences", int64_t{0}) ||
          before.value("bin_bytes", int64_t{0}) != after.value("bin_bytes", int64_t{0})) {
        differences.push_back(fmt::format(
            "data.path's dataset '{}' held {} documents in {} bytes and now holds {} in {} (prepared again?)",
            after.value("prefix", std::string()), before.value("sequences", int64_t{0}),
            before.value("bin_bytes", int64_t{0}), after.value("sequences", int64_t{0}),
            after.value("bin_bytes", int64_t{0})));
      }
    }
  }
  if (saved.value("split", std::string()) != now.value("split", std::string())) {
    differences.push_back("data.split was '" + saved.value("split", std::string()) + "' and is '" +
                          now.value("split", std::string()) + "'");
  }
  if (saved.value("order", std::string()) != now.value("order", std::string())) {
    differences.push_back("data.order was " + saved.value("order", std::string()) + " and is " +
                          now.value("order", std::string()));
  }
  if ((shuffled(saved) || shuffled(now)) && saved.value("seed", int64_t{0}) != now.value("seed", int64_t{0})) {
    differences.push_back(fmt::format("train.seed (the shuffle's) was {} and is {}", saved.value("seed", int64_t{0}),
                                      now.value("seed", int64_t{0})));
  }
  return differences;
}

void require_data_continues(const nlohmann::json& manifest, const nlohmann::json& now, const std::string& source,
                            bool allow_data_change) {
  if (!manifest.contains("data")) return;
  std::string changed;
  for (const auto& d : data_record_differences(manifest.at("data"), now)) changed += (changed.empty() ? "" : "; ") + d;
  if (changed.empty()) return;
  const auto consumed = manifest.value("consumed_samples", int64_t{0});
  if (!allow_data_change) {
    throw InputError(fmt::format(
        "{}: the data would not continue the checkpoint's order ({}): going on after its {} consumed samples, some "
        "samples would be trained twice and others never. Resume with the data it was trained on, or pass "
        "--allow-data-change to go on at that count in the new order (a new mixture, say)",
        source, changed, consumed));
  }
  warn0("{}: --allow-data-change: the data changed ({}); training goes on after sample {} of the new order", source,
        changed, consumed);
}

}  // namespace loom::launch
