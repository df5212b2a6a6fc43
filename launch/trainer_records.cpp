// What the Trainer writes into the run directory: config.yaml and metrics.jsonl (with TensorBoard's
// events), opened once start-up has passed, and each step's row.
#include <fstream>

#include "launch/trainer.h"

namespace loom::launch {

void Trainer::write_metrics(int64_t step, const StepResult& result, double lr, double grad_norm, double step_s,
                            int64_t consumed, double used_scale, bool skipped, const nlohmann::json& memory,
                            const nlohmann::json& extra) {
  // MoE statistics are collective: every rank takes part, rank 0 writes.
  const nlohmann::json moe = moe_monitor_ ? moe_monitor_->collect(groups_) : nlohmann::json();
  if (!metrics_) return;
  const int64_t tokens_per_step = config_.train.global_batch_size * config_.model.seq_len;
  nlohmann::json record{{"step", step},
                        {"loss", result.loss},
                        {"lr", lr},
                        {"grad_norm", grad_norm},
                        {"step_ms", step_s * 1000.0},
                        {"tokens_per_s", static_cast<double>(tokens_per_step) / step_s},
                        {"consumed_samples", consumed}};
  if (config_.parallel.pp > 1) record["pipeline"] = pipeline_metrics(config_, result.stages);
  if (scaler_) record["loss_scale"] = used_scale;
  if (scaler_ || skipped) record["skipped"] = skipped;
  if (!memory.is_null()) record["memory"] = memory;
  if (extra.is_object()) record.update(extra);
  if (!moe.is_null()) record["moe"] = moe;
  metrics_->write(record);
}

void Trainer::open_records(const std::string& resume, int64_t resumed_step) {
  if (groups_.rank() != 0) return;
  std::ofstream(run_dir_ + "/config.yaml") << to_yaml(config_);
  const std::string path = run_dir_ + "/metrics.jsonl";
  // A fresh run starts the record anew (launch/run_directory.h refused it where that replaces another
  // run's, unless asked); a resumed one continues it.
  if (resume.empty()) std::ofstream(path, std::ios::trunc);
  metrics_ = std::make_unique<MetricsWriter>(
      path, config_.log.tensorboard ? std::make_unique<TensorBoardWriter>(run_dir_ + "/tensorboard") : nullptr);
  if (!resume.empty()) metrics_->continue_after(resumed_step);  // 0 when --resume auto found nothing to resume
}

}  // namespace loom::launch
