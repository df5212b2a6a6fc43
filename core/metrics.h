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
  // Appends to PATH. A torn last row (a crash or a full disk in the middle of a write) is cut back
  // to the last whole row first, with a warning. TENSORBOARD, when given, receives every record's
  // scalars (scalars_of_record) at its "step".
  explicit MetricsWriter(const std::string& path, std::unique_ptr<TensorBoardWriter> tensorboard = nullptr);
  // Appends one whole row and flushes it, so a killed run keeps every finished step. A row that
  // cannot be written whole (a full disk) is taken back off the file before the error is thrown.
  void write(const nlohmann::json& record);
  // A run resumed from the checkpoint of STEP trains the steps after it again: their rows from the
  // attempt that died move to metrics.superseded.jsonl beside the file, with a warning.
  void continue_after(int64_t step);

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
