// The training loop: one optimizer step is micro_batches forward/backward
// passes on this rank's share of the global batch, gradients averaged over dp,
// clipping by the global norm, and an AdamW update.
#pragma once

#include <memory>
#include <string>

#include "core/batch_sampler.h"
#include "core/config.h"
#include "core/metrics.h"
#include "launch/commands.h"
#include "models/language_model.h"
#include "optim/grad_clip.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/data_parallel.h"
#include "parallel/process_groups.h"

namespace loom::launch {

struct TrainSummary {
  int64_t steps = 0;
  double first_loss = 0.0;
  double last_loss = 0.0;
  double seconds = 0.0;
  double tokens_per_s = 0.0;
};

class Trainer {
 public:
  // CONFIG must be resolved for GROUPS' world. RUN_DIR exists on rank 0.
  Trainer(const Config& config, parallel::ProcessGroups& groups, std::string run_dir,
          const models::ModelFactory& make_model, FaultInjection fault = {});
  TrainSummary run();

 private:
  // Forward and backward over this rank's micro-batches; returns their mean loss, [1] float64.
  torch::Tensor forward_backward(int64_t consumed);
  void maybe_inject_fault(int64_t step) const;
  void log_progress(int64_t step, double loss, double lr, double grad_norm, double step_s, double mean_step_s) const;

  Config config_;
  parallel::ProcessGroups& groups_;
  std::string run_dir_;
  FaultInjection fault_;
  std::unique_ptr<TokenCorpus> corpus_;
  std::unique_ptr<BatchSampler> sampler_;
  std::unique_ptr<parallel::TensorParallelRng> rng_;
  std::shared_ptr<models::LanguageModel> model_;
  std::vector<parallel::ParallelParameter> params_;
  std::unique_ptr<optim::AdamW> optimizer_;
  optim::CosineSchedule schedule_;
  std::unique_ptr<parallel::GradientReducer> dp_grads_;
  std::unique_ptr<parallel::GradientReducer> sequence_parallel_grads_;
  std::unique_ptr<MetricsWriter> metrics_;
};

}  // namespace loom::launch
