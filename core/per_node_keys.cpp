#include "core/per_node_keys.h"

#include <algorithm>

#include "core/config_fields.h"

namespace loom {

const std::vector<std::string>& per_node_keys() {
  static const std::vector<std::string> keys = {"train.threads_per_rank", "train.peak_tflops", "train.device",
                                                "train.memory_check"};
  return keys;
}

Config without_per_node_keys(Config config) {
  const Config defaults;
  const auto& keys = per_node_keys();
  for (const auto& field : config_fields()) {
    if (std::find(keys.begin(), keys.end(), field.name()) != keys.end()) field.parse(config, field.print(defaults));
  }
  return config;
}

}  // namespace loom
