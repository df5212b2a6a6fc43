// RUN_DIR/metrics.jsonl: one JSON object per optimizer step, written by global rank 0;
// with log.tensorboard, the same records as TensorBoard scalars.
#pragma once

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensorboard_writer.h"

namespace loom {

class MetricsWriter {
 public:
  // TENSORBOARD, when given, receives every record's scalars (scalars_of_record) at its "step".
  explicit MetricsWriter(const std::string& path, std::unique_ptr<TensorBoardWriter> tensorboard = nullptr);
  // Appends one line and flushes it, so a killed run keeps every finished step.
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// The numbers of a metrics record worth a curve, tagged by family: train/loss, train/lr, val/loss,
// perf/tokens_per_s, memory/..._mib (the largest rank's), moe/... . Keys a record lacks, or
// whose value is not a number (a non-finite loss is written as null), give no scalar.
Scalars scalars_of_record(const nlohmann::json& record);

}  // namespace loom
