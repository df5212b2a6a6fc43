// The training loop: one optimizer step runs this rank's share of the pipeline
// schedule over its micro-batches of the global batch (with pp = 1: forward,
// backward, forward, backward, ...), then lets the gradient synchronisation
// (parallel/gradient_sync.h) sum and average the gradients, clips by the global
// norm and updates with AdamW. Everything a step does not need to know lives
// beside it: the run directory, stop signals, the step report, the thread
// policy and the supported combinations (launch/).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/config.h"
#include "core/metrics.h"
#include "core/precision.h"
#include "core/training_data.h"
#include "launch/checkpoint.h"
#include "launch/commands.h"
#include "launch/divergence_guard.h"
#include "launch/moe_metrics.h"
#include "launch/step_losses.h"
#include "launch/step_report.h"
#include "launch/step_split.h"
#include "launch/step_watchdog.h"
#include "launch/straggler_report.h"
#include "models/language_model.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/gradient_sync.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"

namespace loom::launch {

class Trainer {
 public:
  // CONFIG must be resolved for GROUPS' world. RUN_DIR exists on rank 0.
  // DEVICE holds the model, its gradients and optimizer state, and the batches (core/device.h).
  Trainer(const Config& config, parallel::ProcessGroups& groups, std::string run_dir,
          const models::PipelineModelFactory& make_model, FaultInjection fault = {},
          torch::Device device = torch::kCPU);
  // RESUME: "auto", a checkpoint path, or empty for a fresh start.
  // ALLOW_DATA_CHANGE: resume over other data than the checkpoint's (launch/data_record.h).
  TrainSummary run(const std::string& resume = "", bool allow_data_change = false);
  // For `loom verify`: the run's first step writes its reduced gradients (before clipping) and its
  // weights after the update into DIR (launch/step_dump.h). Before run().
  void dump_first_step(std::string dir) { dump_dir_ = std::move(dir); }
  // When this rank's job started (its command's first instruction), for train.exit_duration_mins: the
  // rendezvous, the checks and the set-up count, as a scheduler's clock counts them. Before run().
  void set_job_start(std::chrono::steady_clock::time_point start) { job_start_ = start; }

 private:
  using StepResult = launch::StepResult;
  // Once start-up has passed (a resumed checkpoint loaded): config.yaml, and metrics.jsonl started
  // anew for a fresh run or continued after RESUMED_STEP (rank 0). Collective: when rank 0 cannot,
  // every rank throws.
  void open_records(const std::string& resume, int64_t resumed_step);
  void open_records_on_rank0(const std::string& resume, int64_t resumed_step);
  // Forward and backward over this rank's micro-batches; the mean loss comes
  // from the last stage. Each micro-batch's loss is multiplied by LOSS_SCALE for backward.
  StepResult forward_backward(int64_t consumed, double loss_scale);
  // Checkpoints read and write whole parameters: ZeRO-3 gathers them around.
  void save_checkpoint(const TrainingState& state, const std::function<void()>& midway);
  void maybe_inject_fault(int64_t step);
  // The communicators of the fault's group (for dp: the gradient reductions').
  std::vector<parallel::Communicator*> fault_groups() const;
  // The scale fault: planted on the communicators of the fault's group (launch/commands.h).
  void plant_scale_fault() const;
  // The kill_in_save fault for the checkpoint saved after STEP, if it is this rank's.
  std::function<void()> save_fault(int64_t step) const;
  // The slow_resume fault: what rank 0 runs while it checks the checkpoints of a resume, if its.
  std::function<void()> resume_fault() const;
  // The loss scale for this step's backward (1 without fp16), infinite for an injected overflow.
  double backward_loss_scale(int64_t step) const;
  // dump_first_step's files: the gradients (collective under ZeRO-2/3) or the updated weights
  // (collective: whole parameters, gathered around).
  // A log line's records: avg_loss (Megatron-LM's printed loss: the mean of the finite losses
  // since the last log line) and each training dataset's epoch.
  void add_interval_records(nlohmann::json& extra);
  void dump_gradients();
  void dump_weights();
  // The step's metrics record (rank 0).
  void write_metrics(int64_t step, const StepResult& result, double lr, double grad_norm, double step_s,
                     int64_t consumed, double used_scale, bool skipped, const nlohmann::json& memory,
                     const nlohmann::json& extra);
  // Collective over the world, once a step: the step's loss and gradient norm, non-finite where any
  // rank's is, so that every rank skips alike; and the largest status of the checkpoint being written
  // in the background (Checkpointer::pending_status); and whether any rank received a stop signal
  // (a preemption notice may reach only some ranks: they agree before anyone stops).
  struct StepAgreement {
    double loss, grad_norm;
    int checkpoint_status;
    bool stop_signal;
    bool agent_lost;   // some rank's stop came from its torchrun agent's death
    bool out_of_time;  // some rank is past train.exit_duration_mins
  };
  StepAgreement agree_on_step(double loss, double grad_norm);
  // Saves after STEP unless the state came out of a skipped non-finite step (it says so instead).
  void save_if_trusted(int64_t step, int64_t consumed);
  TrainingState state_after(int64_t step, int64_t consumed) const;
  // The mean loss over the first eval.steps global batches of the validation data, every rank alike:
  // the same samples at every evaluation and in every layout, no dropout, no update. STEP: the step it
  // follows, for the watchdog.
  double evaluate(int64_t step);
  // This rank's part of BATCH's sequences under context parallelism (chunks r and 2cp-1-r), or BATCH,
  // on this rank's device.
  Batch this_rank_part(Batch batch);
  // Whether STEP evaluates: every eval.interval steps and at the last step, when there is validation data.
  bool evaluates_at(int64_t step) const;
  // A line when a training dataset starts a new epoch (the samples up to CONSUMED are drawn).
  void log_epochs(int64_t step, int64_t consumed);

  Config config_;
  torch::Device device_;
  parallel::ProcessGroups& groups_;
  std::string run_dir_;
  FaultInjection fault_;
  std::string dump_dir_;
  // Why replicas read different model.init_from weights (launch/weight_agreement.h); refused unless resumed.
  std::string init_from_disagreement_;
  std::chrono::microseconds data_delay_{0};  // the slow-data fault's sleep before each batch read
  StepClock clock_;                          // where each step's time goes (launch/step_split.h)
  std::unique_ptr<TrainingData> data_;
  std::unique_ptr<parallel::TensorParallelRng> rng_;
  std::vector<std::shared_ptr<models::LanguageModel>> chunks_;  // this rank's virtual stages, in order
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;
  Precision precision_;
  std::unique_ptr<parallel::GradientSync> sync_;  // dp buckets or ZeRO-2/3 units, master weights
  std::unique_ptr<optim::LossScaler> scaler_;     // fp16
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::LrSchedule schedule_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<MoEMonitor> moe_monitor_;  // MoE models only
  DivergenceGuard guard_;
  std::vector<int64_t> epochs_;          // of each training dataset, as last logged
  std::vector<double> interval_losses_;  // the finite losses since the last log line, for avg_loss
  StragglerMonitor stragglers_;
  std::unique_ptr<StepWatchdog> watchdog_;  // train.step_timeout_s, from the first step of run()
  // Where train.exit_duration_mins counts from: the job's start (set_job_start), else the trainer's.
  std::chrono::steady_clock::time_point job_start_ = std::chrono::steady_clock::now();
};

}  // namespace loom::launch
