// What the Trainer writes into the run directory: config.yaml and metrics.jsonl (with TensorBoard's
// events), opened once start-up has passed, and each step's row; and the log's line when a dataset
// wraps around.
#include <exception>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/logging.h"
#include "core/training_data.h"
#include "launch/run_directory.h"
#include "launch/step_dump.h"
#include "launch/trainer.h"

namespace loom::launch {

namespace fs = std::filesystem;

void Trainer::write_metrics(int64_t step, const StepResult& result, double lr, double grad_norm, double step_s,
                            int64_t consumed, double used_scale, bool skipped, const nlohmann::json& memory,
                            const nlohmann::json& extra) {
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
  if (extra.is_object()) record.update(extra);  // MoE's record ("moe") among them
  metrics_->write(record);
}

void Trainer::open_records(const std::string& resume, int64_t resumed_step) {
  // Rank 0 writes; every rank learns whether it could, so that none waits in step 1's collectives
  // for a rank that has already left (a full disk, a read-only run directory).
  int64_t failure = 0;  // 1: bad input, 2: the machine's
  std::exception_ptr error;
  if (groups_.rank() == 0) {
    try {
      open_records_on_rank0(resume, resumed_step);
    } catch (const InputError&) {
      failure = 1, error = std::current_exception();
    } catch (const std::exception&) {
      failure = 2, error = std::current_exception();
    }
  }
  auto flag = torch::full({1}, failure, torch::kInt64);
  groups_.world_comm().broadcast(flag, 0).wait();
  if (error) std::rethrow_exception(error);
  const std::string what =
      "rank 0 could not start the records of run directory '" + run_dir_ + "' (its message says why)";
  if (flag.item<int64_t>() == 1) throw InputError(what);
  if (flag.item<int64_t>() == 2) throw EnvironmentError(what);
}

void Trainer::open_records_on_rank0(const std::string& resume, int64_t resumed_step) {
  const fs::path dir(run_dir_);
  // config.yaml whole or as it was: written beside and renamed over.
  const fs::path config = dir / "config.yaml", written = dir / ".config.yaml.tmp";
  {
    std::ofstream out(written, std::ios::trunc);
    out << kRunConfigHeader << "\n" << to_yaml(config_);
    out.flush();
    if (!out) throw EnvironmentError("cannot write " + written.string() + " (is the disk full?)");
  }
  std::error_code code;
  fs::rename(written, config, code);
  if (code)
    throw EnvironmentError("cannot rename " + written.string() + " to " + config.string() + ": " + code.message());
  const std::string path = (dir / "metrics.jsonl").string();
  if (resume.empty()) {
    // A fresh run starts the record anew (launch/run_directory.h refused it where that replaces
    // another run's, unless --overwrite-run-dir): the earlier run's curves go with its rows, or
    // TensorBoard would draw both runs as one.
    std::ofstream(path, std::ios::trunc);
    fs::remove(dir / "metrics.superseded.jsonl", code);
    if (fs::is_directory(dir / "tensorboard", code)) {
      for (const auto& entry : fs::directory_iterator(dir / "tensorboard")) {
        if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) fs::remove(entry.path(), code);
      }
    }
  }
  metrics_ = std::make_unique<MetricsWriter>(
      path, config_.log.tensorboard ? std::make_unique<TensorBoardWriter>(run_dir_ + "/tensorboard") : nullptr);
  if (!resume.empty()) metrics_->continue_after(resumed_step);  // 0 when --resume auto found nothing to resume
}

void Trainer::add_interval_records(nlohmann::json& extra) {
  double sum = 0.0;
  for (double l : interval_losses_) sum += l;
  if (!interval_losses_.empty()) extra["avg_loss"] = sum / static_cast<double>(interval_losses_.size());
  interval_losses_.clear();
  extra["epoch"] = epochs_.size() == 1 ? nlohmann::json(epochs_[0]) : nlohmann::json(epochs_);
}

void Trainer::dump_gradients() {
  write_rank_tensors(dump_dir_, "gradients", sync_->parameters(), sync_->whole_gradients(), groups_);
}

void Trainer::dump_weights() {
  sync_->gather_all();
  std::vector<torch::Tensor> weights;
  for (const auto& p : sync_->parameters()) weights.push_back(p.tensor);
  write_rank_tensors(dump_dir_, "weights", sync_->parameters(), weights, groups_);
  sync_->release_all(/*loaded=*/false);
}

void Trainer::log_epochs(int64_t step, int64_t consumed) {
  const auto epochs = data_->train().epochs_at(consumed);
  if (epochs_.size() != epochs.size()) epochs_.assign(epochs.size(), 1);
  // Said at epochs 2 to 4 and then at powers of two: a small dataset of a blend can wrap every
  // step, and a line each time would fill a long run's log.
  auto said = [](int64_t epoch) { return epoch <= 4 || (epoch & (epoch - 1)) == 0; };
  for (size_t d = 0; d < epochs.size(); ++d) {
    for (int64_t epoch = epochs[d]; epoch > epochs_[d]; --epoch) {  // the newest to say, if any
      if (!said(epoch)) continue;
      info0("{} wrapped around: epoch {} of it started during step {}{}", data_->describe(d), epoch, step,
            epoch >= 4 ? " (said again at the next power of two)" : "");
      break;
    }
  }
  epochs_ = epochs;
}

}  // namespace loom::launch
