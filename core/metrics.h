// RUN_DIR/metrics.jsonl: one JSON object per optimizer step, written by global rank 0.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace loom {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  // Appends one line and flushes it, so a killed run keeps every finished step.
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace loom
