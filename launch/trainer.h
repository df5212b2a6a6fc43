// The training loop: one optimizer step runs this rank's share of the
// pipeline schedule over its micro-batches of the global batch (with pp = 1:
// forward, backward, forward, backward, ...), then sums the tied embedding's
// gradients over the embedding group, averages gradients over dp, clips by
// the global norm, and updates with AdamW.
#pragma once

#include <memory>
#include <string>

#include "core/batch_sampler.h"
#include "core/config.h"
#include "core/metrics.h"
#include "core/precision.h"
#include "launch/checkpoint.h"
#include "launch/commands.h"
#include "launch/moe_metrics.h"
#include "models/language_model.h"
#include "optim/grad_clip.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/master_weights.h"
#include "parallel/data_parallel.h"
#include "parallel/fully_sharded.h"
#include "parallel/grad_buckets.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"

namespace loom::launch {

struct TrainSummary {
  int64_t steps = 0;  // run in this job
  int64_t last_step = 0;
  bool stopped_early = false;  // by a signal or train.exit_after
  double first_loss = 0.0;
  double last_loss = 0.0;
  double seconds = 0.0;
  double tokens_per_s = 0.0;
};

class Trainer {
 public:
  // CONFIG must be resolved for GROUPS' world. RUN_DIR exists on rank 0.
  // DEVICE holds the model, its gradients and optimizer state, and the batches (core/device.h).
  Trainer(const Config& config, parallel::ProcessGroups& groups, std::string run_dir,
          const models::PipelineModelFactory& make_model, FaultInjection fault = {},
          torch::Device device = torch::kCPU);
  // RESUME: "auto", a checkpoint path, or empty for a fresh start.
  TrainSummary run(const std::string& resume = "");

 private:
  struct StepResult {
    double loss = 0.0;  // mean over the global batch
    std::vector<parallel::PipelineStepTiming> stages;  // per pipeline stage
  };
  // Forward and backward over this rank's micro-batches; the mean loss comes
  // from the last stage. Each micro-batch's loss is multiplied by LOSS_SCALE for backward.
  StepResult forward_backward(int64_t consumed, double loss_scale);
  // fp16: divides the (reduced) gradients by the loss scale.
  void unscale_gradients();
  // ZeRO-3's gradient norm and clipping over the shards.
  double clip_sharded_gradients();
  // Calls F on each set of sharded units (dense, experts) that exists, with the indices of its parameters in params_.
  void for_each_sharded(const std::function<void(parallel::FullyShardedParameters&, const std::vector<size_t>&)>& f);
  // Checkpoints read and write whole parameters: ZeRO-3 gathers them around.
  void save_checkpoint(const TrainingState& state, const std::function<void()>& midway);
  void maybe_inject_fault(int64_t step) const;
  // Collective: every rank's bytes of parameters, gradients and optimizer state, and ACTIVATION_BYTES.
  nlohmann::json memory_report(int64_t activation_bytes);
  // The kill_in_save fault for the checkpoint saved after STEP, if it is this rank's.
  std::function<void()> save_fault(int64_t step) const;
  void log_progress(int64_t step, double loss, double lr, double grad_norm, double step_s, double mean_step_s) const;

  Config config_;
  torch::Device device_;
  parallel::ProcessGroups& groups_;
  std::string run_dir_;
  FaultInjection fault_;
  std::unique_ptr<TokenCorpus> corpus_;
  std::unique_ptr<BatchSampler> sampler_;
  std::unique_ptr<parallel::TensorParallelRng> rng_;
  std::vector<std::shared_ptr<models::LanguageModel>> chunks_;  // this rank's virtual stages, in order
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;
  Precision precision_;
  // This rank's parameters as gradient reduction, clipping, the optimizer and
  // checkpoints see them: the model's own, or their fp32 masters under mixed precision.
  std::vector<parallel::ParallelParameter> params_;
  std::unique_ptr<optim::MasterWeights> master_;  // bf16 and fp16
  std::unique_ptr<optim::LossScaler> scaler_;     // fp16
  // ZeRO-3 (and ZeRO-2 in fp32) with dp > 1: the dense parameters over dp, MoE experts over expert-dp.
  std::unique_ptr<parallel::FullyShardedParameters> sharded_, sharded_experts_;
  std::vector<size_t> sharded_index_, sharded_experts_index_;  // their parameters' indices in params_
  // Mixed precision with units: the tied embedding's index in sharded_ and the fp32 view its sum uses.
  std::vector<std::pair<size_t, torch::Tensor>> tied_in_sharded_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::CosineSchedule schedule_;
  std::unique_ptr<parallel::GradientBuckets> dp_grads_;  // when dp > 1
  std::unique_ptr<parallel::GradientBuckets> expert_grads_;  // MoE experts, over expert-dp, when dp > 1
  std::unique_ptr<parallel::GradientReducer> sequence_parallel_grads_;
  std::unique_ptr<parallel::GradientReducer> tied_grads_;  // summed over the embedding group
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<MoEMonitor> moe_monitor_;  // MoE models only
};

}  // namespace loom::launch
