#include "launch/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "core/cpu_memory.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/logging.h"
#include "core/loss_mask.h"
#include "launch/block_wrapping.h"
#include "launch/gradient_sync_options.h"
#include "launch/make_optimizer.h"
#include "launch/resume_choice.h"
#include "launch/step_profiler.h"
#include "launch/stop_signals.h"
#include "launch/weight_agreement.h"

namespace loom::launch {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

Trainer::Trainer(const Config& config, parallel::ProcessGroups& groups, std::string run_dir,
                 const models::PipelineModelFactory& make_model, FaultInjection fault, torch::Device device)
    : config_(config),
      device_(device),
      groups_(groups),
      run_dir_(std::move(run_dir)),
      fault_(std::move(fault)),
      clock_(*groups.stats()),
      guard_(config.train.max_skipped_steps,
             config.train.precision == TrainPrecision::fp16 && config.train.loss_scale <= 0) {
  const auto& m = config_.model;
  const auto& t = config_.train;
  const auto& p = config_.parallel;
  data_ = std::make_unique<TrainingData>(config_);
  if (data_->eod_id() >= 0)
    info0("data.eod_mask_loss: no loss on the targets after token {} (the mean is over the targets left)",
          data_->eod_id());
  const auto& coords = groups_.coords();
  rng_ = std::make_unique<parallel::TensorParallelRng>(static_cast<uint64_t>(t.seed), coords.tp, coords.dp, coords.pp);
  precision_ = Precision::of(t.precision);
  sync_ = parallel::make_gradient_sync(groups_, gradient_sync_options(config_, precision_));
  const models::TensorParallelContext tp{&groups_.tp(), p.sequence_parallel, rng_.get(),
                                         &groups_.ep(), &groups_.cp(),       p.cp_comm};
  std::vector<parallel::ParallelParameter> params;
  std::vector<torch::Tensor> tied;
  std::vector<models::MoEStats*> moe_stats;
  for (int64_t chunk = 0; chunk < p.virtual_stages; ++chunk) {
    auto piece = make_model(config_, tp, models::PipelinePosition{chunk * p.pp + coords.pp, p.pp * p.virtual_stages});
    models::require_layout_support(*piece, p.cp, t.recompute);
    // Initialised on the CPU, as in every layout, then moved: the same numbers on every device.
    piece->to(device_);
    piece->train();
    // ZeRO-3 and full recomputation go around the blocks the model declares, from outside.
    if (auto* stack = piece->block_stack())
      wrap_blocks(*stack, sync_->units(), t.recompute == Recompute::full, &rng_->split());
    for (const auto& param : piece->parallel_parameters()) params.push_back(param);
    for (const auto& tensor : piece->tied_parameters()) tied.push_back(tensor);
    for (auto* stats : piece->moe_stats()) moe_stats.push_back(stats);
    chunks_.push_back(std::move(piece));
  }
  if (m.moe.enabled()) moe_monitor_ = std::make_unique<MoEMonitor>(config_, moe_stats);
  TORCH_CHECK(tied.empty() || groups_.has(parallel::GroupKind::embedding), "rank ", groups_.rank(),
              " holds tied parameters but is in no embedding group");
  if (!m.init_from.empty()) {  // (replicas that read different bytes: refused in run() unless resumed)
    std::vector<std::string> read;
    init_from_disagreement_ = load_on_every_rank(params, groups_, m.init_from, [&] {
      read = init_from_pretrained(config_, params, coords.tp, groups_.tp().size());
      if (moe_monitor_) moe_monitor_->restore_expert_bias(expert_bias_from_pretrained(config_), "model.init_from");
    });
    warn_unused_hf_tensors(config_, read, groups_);
  }
  const auto block_of = block_of_parameters(chunks_, params);
  sync_->attach(std::move(params), std::move(tied), block_of);
  if (precision_.loss_scaling()) {
    scaler_ = std::make_unique<optim::LossScaler>(
        optim::LossScalerOptions{t.loss_scale, t.initial_loss_scale, t.loss_scale_window, t.min_loss_scale});
  }
  const std::vector<int64_t> activation_shape =
      p.pp > 1 ? chunks_.front()->activation_shape(t.micro_batch_size) : std::vector<int64_t>{};
  pipeline_ =
      std::make_unique<parallel::PipelineExecutor>(p.schedule, config_.micro_batches_per_step(), p.virtual_stages,
                                                   groups_.pp(), activation_shape, precision_.activations, device_);
  schedule_ = optim::schedule_of(t, t.steps);
  optimizer_ = make_optimizer(config_, *sync_, groups_);
  checkpointer_ =
      std::make_unique<Checkpointer>(config_, groups_, sync_->parameters(), *optimizer_, *rng_, run_dir_, sync_.get());
}

Trainer::StepResult Trainer::forward_backward(int64_t consumed, double loss_scale) {
  const auto& t = config_.train;
  const int64_t micro_batches = config_.micro_batches_per_step();
  const int64_t last_chunk = config_.parallel.virtual_stages - 1;
  const bool holds_loss = groups_.coords().pp == config_.parallel.pp - 1;
  // data.eod_mask_loss: each micro-batch's mean over all its targets, times this, adds up to the mean over
  // the global batch's targets left (1 without it; only the loss's stage reads the global batch for it).
  const auto count_start = Clock::now();
  const double counted =
      holds_loss ? counted_target_factor(data_->train(), consumed, t.global_batch_size, data_->eod_id()) : 1.0;
  if (data_->eod_id() >= 0) clock_.add(StepClock::Part::data, seconds_since(count_start));
  const auto& at = groups_.coords();
  if (counted == 0.0 && at.tp == 0 && at.cp == 0 && at.dp == 0)  // a data.eod_id that is most of the data
    log::warn(
        "every target of the global batch from sample {} follows token {} (data.eod_mask_loss): its loss 0 "
        "counts nothing",
        consumed, data_->eod_id());
  const double scale = loss_scale * counted;
  // Summed on the device, read once per step: no host synchronisation per micro-batch.
  auto loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  auto timing = pipeline_->run([&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
    const int64_t first = micro_batch_start(consumed, t.global_batch_size, config_.parallel.dp, groups_.coords().dp,
                                            t.micro_batch_size, micro);
    const auto read_start = Clock::now();
    watchdog_->doing("reading data");
    if (data_delay_.count() > 0) std::this_thread::sleep_for(data_delay_);
    Batch batch = this_rank_part(data_->train().batch(first, t.micro_batch_size));
    clock_.add(StepClock::Part::data, seconds_since(read_start));
    watchdog_->doing("in the forward and backward passes");
    auto& piece = *chunks_[static_cast<size_t>(chunk)];
    auto out = piece.forward(input.defined() ? input : batch.tokens, batch.targets);
    if (!holds_loss || chunk != last_chunk) return out;
    loss_sum += models::require_scalar_loss(out).detach().to(torch::kFloat64);
    // Averaging over micro-batches here and over dp in the all-reduce: the mean loss's gradient.
    return scale == 1.0 ? out / static_cast<double>(micro_batches) : out * (scale / static_cast<double>(micro_batches));
  });
  std::vector<double> losses{loss_sum.item<double>() * counted / static_cast<double>(micro_batches)};
  if (config_.model.mtp.depth > 0) {  // multi-token prediction's loss beside the model's
    const auto mtp = holds_loss ? chunks_.back()->take_mtp_loss() : torch::Tensor();
    losses.push_back(mtp.defined() ? mtp.item<double>() / static_cast<double>(micro_batches) : 0.0);
  }
  return share_step_losses(groups_, losses, timing);
}

void Trainer::save_checkpoint(const TrainingState& state, const std::function<void()>& midway) {
  sync_->gather_all();
  checkpointer_->save(state, midway);
  sync_->release_all(/*loaded=*/false);
}

Trainer::StepAgreement Trainer::agree_on_step(double loss, double grad_norm) {
  const double minutes = config_.train.exit_duration_mins;
  const bool out_of_time = minutes > 0 && seconds_since(job_start_) >= minutes * 60.0;
  auto flags = torch::tensor({std::isfinite(loss) ? 0.0 : 1.0, std::isfinite(grad_norm) ? 0.0 : 1.0,
                              static_cast<double>(checkpointer_->pending_status()), static_cast<double>(stop_signal()),
                              stop_signal() != 0 && torchrun_agent_gone() ? 1.0 : 0.0, out_of_time ? 1.0 : 0.0},
                             torch::kFloat64);
  groups_.world_comm().all_reduce(flags, parallel::ReduceOp::max).wait();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {flags[0].item<double>() > 0 ? (std::isfinite(loss) ? nan : loss) : loss,
          flags[1].item<double>() > 0 ? (std::isfinite(grad_norm) ? nan : grad_norm) : grad_norm,
          static_cast<int>(flags[2].item<double>()),
          flags[3].item<double>() > 0,
          flags[4].item<double>() > 0,
          flags[5].item<double>() > 0};
}

void Trainer::save_if_trusted(int64_t step, int64_t consumed) {
  if (!guard_.state_trusted()) {
    warn0("not saving the checkpoint of step {}: the state could not train ({} non-finite steps in a row)", step,
          guard_.streak());
    return;
  }
  save_checkpoint(state_after(step, consumed), save_fault(step));
}

TrainingState Trainer::state_after(int64_t step, int64_t consumed) const {
  TrainingState state;
  state.step = step;
  state.consumed_samples = consumed;
  if (scaler_) {
    state.loss_scale = scaler_->scale();
    state.loss_scale_clean_steps = scaler_->clean_steps();
    state.skipped_steps = scaler_->skipped_steps();
  }
  if (moe_monitor_) state.expert_bias = moe_monitor_->expert_bias();
  state.interval_losses = interval_losses_;
  return state;
}

TrainSummary Trainer::run(const std::string& resume, bool allow_data_change) {
  const auto& t = config_.train;
  const int64_t tokens_per_step = t.global_batch_size * config_.model.seq_len;
  TrainSummary summary;
  const auto start = Clock::now();
  double timed_seconds = 0.0;  // all steps but the first, which pays for warm-up
  TrainingState state;
  bool resumed = false;
  summary.resume_requested = !resume.empty();
  if (!resume.empty()) {
    sync_->gather_all();
    if (auto loaded = checkpointer_->load(resume, allow_data_change, resume_fault())) {
      state = *loaded;
      resumed = true;
      interval_losses_ = state.interval_losses;
    }
    sync_->release_all(/*loaded=*/true);
    if (scaler_ && state.loss_scale > 0)
      scaler_->restore(state.loss_scale, state.loss_scale_clean_steps, state.skipped_steps);
    if (moe_monitor_) moe_monitor_->restore_expert_bias(state.expert_bias, "--resume " + resume);
  }
  if (!resumed && !init_from_disagreement_.empty()) throw InputError(init_from_disagreement_);
  const int64_t first_step = state.step + 1;
  if (resume_has_work(t, state.step)) {
    open_records(resume, state.step);  // (one with nothing to do leaves config.yaml and the rows as they were)
  } else {
    info0("nothing to do: the run is already at step {} of train.steps = {} (raise train.steps to train further)",
          state.step, t.steps);
  }
  int64_t consumed = state.consumed_samples;
  epochs_ = data_->train().epochs_at(consumed);  // a resumed run's wraps count from where it was
  const bool checkpointing = !config_.checkpoint.dir.empty();
  if (checkpointing) install_stop_handlers();
  summary.last_step = state.step;
  std::optional<std::pair<int64_t, double>> last_save_ms;  // step, ms: goes into the next step's row
  if (t.exit_after == state.step) {  // e.g. exit_after 0: save the initial state (a pretrained router's biases too)
    save_checkpoint(state_after(state.step, state.consumed_samples), {});
    summary.stopped_by = "train.exit_after";
  }
  const auto& log_config = config_.log;
  const int64_t profile_end = std::min(t.steps, std::max(log_config.profile_step_end, log_config.profile_step_start));
  StepProfiler profiler(groups_.rank() == 0 ? log_config.profile_step_start : 0, profile_end,
                        run_dir_ + "/profile_rank0.json", device_);
  watchdog_ = std::make_unique<StepWatchdog>(StepWatchdogOptions{t.step_timeout_s, config_.parallel.timeout_s},
                                             groups_.stats()->presence());
  for (int64_t step = first_step; step <= t.steps && !summary.stopped_early(); ++step) {
    watchdog_->start(step, "beginning the step");
    profiler.before_step(step);
    const auto step_start = Clock::now();
    clock_.begin_step();
    maybe_inject_fault(step);
    const double lr = schedule_.at(step - 1 - (scaler_ ? scaler_->skipped_steps() : 0));  // (fp16: as Megatron-LM)
    optimizer_->zero_grad();
    sync_->start_step();
    if (step == first_step) CpuMemory::begin_window();
    const double used_scale = scaler_ ? scaler_->scale() : 0.0;
    const StepResult result = forward_backward(consumed, backward_loss_scale(step));
    // Host memory is what CpuMemory sees; on a GPU the activations live elsewhere (-1: not measured).
    int64_t activation_bytes = step == first_step ? CpuMemory::end_window() : -1;
    if (!device_.is_cpu()) activation_bytes = -1;
    sync_->finish_backward();
    watchdog_->doing("finishing the step's gradients (reduction, clipping, the ranks' agreement)");
    if (scaler_) sync_->unscale(1.0 / scaler_->scale());
    if (!dump_dir_.empty() && step == first_step) dump_gradients();
    const auto [loss, grad_norm, checkpoint_status, signalled, agent_lost, out_of_time] =
        agree_on_step(result.loss, sync_->clip(t.grad_clip));
    // A checkpoint written in the background is published once every rank has written its part
    // (not watched: checkpoint.timeout_s bounds a save).
    if (checkpointer_->save_in_flight()) {
      const StepWatchdog::Unwatched publishing(*watchdog_, step, "finishing the step after a background save's check");
      checkpointer_->on_world_status(checkpoint_status);
    }
    const bool scale_can_drop = scaler_ && t.loss_scale <= 0 && scaler_->scale() > t.min_loss_scale;
    const auto verdict = guard_.judge(step, loss, grad_norm, scale_can_drop);
    const bool skipped = verdict.skip;
    sync_->end_step(!skipped);  // (compression keeps its new state only for an applied update)
    if (scaler_) scaler_->update(skipped);
    if (verdict.diverging) {
      log::warn(
          "step {}: loss {}, gradient norm {}: not finite; the update is skipped ({} in a row, the run stops "
          "at train.max_skipped_steps = {})",
          step, loss, grad_norm, guard_.streak(), t.max_skipped_steps);
    } else if (skipped) {
      info0("fp16: gradients overflowed at step {}; the step is skipped and the loss scale goes {} -> {}", step,
            used_scale, scaler_->scale());
    }
    // The state this step trained from gave a finite loss: its checkpoint is known good.
    if (!verdict.diverging) checkpointer_->confirm_state();
    if (!skipped) {
      const auto update_start = Clock::now();
      watchdog_->doing("in the optimizer's step");
      optimizer_->step(lr);
      sync_->after_update();
      clock_.add(StepClock::Part::optimizer, seconds_since(update_start));
      if (!dump_dir_.empty() && step == first_step) dump_weights();
    }
    consumed += t.global_batch_size;
    watchdog_->doing("ending the step (its records and logs)");
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());  // the step ends when the GPU's work has
    const double step_s = seconds_since(step_start);
    clock_.end_step(step_s, step > first_step || first_step == t.steps);
    if (step == profile_end) {  // the trace's export: as long as its size
      const StepWatchdog::Unwatched exporting(*watchdog_, step, "ending the step (its records and logs)");
      profiler.after_step(step);
    } else {
      profiler.after_step(step);
    }

    const int64_t done = step - first_step;  // steps timed before this one
    if (done > 0) timed_seconds += step_s;
    const double mean_step_s = done > 0 ? timed_seconds / static_cast<double>(done) : step_s;
    if (step == first_step) summary.first_loss = loss;
    summary.last_loss = loss;
    // Model-state bytes of every rank, once: they do not change between steps.
    nlohmann::json memory;
    if (step == first_step) {
      memory = gather_memory_report(groups_, sync_->state_bytes(), optimizer_->state_bytes(), activation_bytes);
    }
    summary.last_step = step;
    nlohmann::json extra = nlohmann::json::object();
    // (train.exit_duration_mins needs checkpoint.dir: config validation)
    // (train.exit_after at the same step wins: the user's own stop, not a scheduler's limit to requeue past)
    const bool timed_out = out_of_time && step < t.steps && step != t.exit_after;
    const bool stop = !guard_.diverged() && checkpointing && (signalled || timed_out);
    const bool save_due = stop || step == t.exit_after ||
                          (checkpointing && step == t.steps) ||  // the end: as Megatron-LM, torchtitan
                          (config_.checkpoint.interval > 0 && step % config_.checkpoint.interval == 0);
    stragglers_.add_step(step_s, groups_.stats()->blocked_seconds());
    const bool log_step = step == 1 || step % config_.log.interval == 0 || step == t.steps;
    log_epochs(step, consumed);
    if (std::isfinite(loss)) interval_losses_.push_back(loss);
    if (log_step) add_interval_records(extra);
    // MoE statistics are collective (rank 0 writes them); the expert biases move with them, before an evaluation.
    if (moe_monitor_) extra["moe"] = moe_monitor_->collect(groups_);
    if (result.mtp_loss >= 0) extra["mtp_loss"] = result.mtp_loss;
    if (evaluates_at(step) && !guard_.diverged() && !timed_out) {  // (out of time: save first)
      const double val_loss = evaluate(step);
      extra["val_loss"] = val_loss;
      extra["val_ppl"] = std::exp(val_loss);
      watchdog_->start(step, "writing the step's records after its evaluation");
    }
    // The first step's time is mostly warm-up: reports start from the next log line.
    if (log_step && step > first_step) extra["step_time"] = stragglers_.report(groups_.world_comm());
    if (log_step) extra["time_split"] = clock_.last_step_json();
    if (last_save_ms) {  // the previous save's time: its step's row was written before it
      extra["checkpoint_ms"] = last_save_ms->second;
      extra["checkpoint_step"] = last_save_ms->first;
      last_save_ms.reset();
    }
    write_metrics(step, result, lr, grad_norm, step_s, consumed, used_scale, skipped, memory, extra);
    // The row first, then the checkpoint: a checkpoint never exists without its step's row.
    if (save_due && !guard_.diverged()) {
      // The time the step loop stood still for the save: all of it, or the copy to host memory with checkpoint.async.
      const auto save_start = Clock::now();
      {
        const StepWatchdog::Unwatched saving(*watchdog_, step, "ending the step after its save (its log line)");
        save_if_trusted(step, consumed);
      }
      last_save_ms = std::make_pair(step, seconds_since(save_start) * 1000.0);
      clock_.add(StepClock::Part::checkpoint, last_save_ms->second / 1000.0);
    }
    if (log_step) {
      log_progress(config_, step, result.loss, lr, grad_norm, step_s, mean_step_s);
    }
    if (extra.contains("val_loss")) {
      const double val_loss = extra["val_loss"].get<double>();
      info0("validation at step {} | loss {:.4f} | perplexity {:.3f}", step, val_loss, std::exp(val_loss));
    }
    if (guard_.diverged()) throw DivergenceError(guard_.report() + "; " + checkpointer_->set_aside_diverged());
    if (stop || step == t.exit_after) {
      // Two calls: under C++20 (LibTorch 2.14 asks for it) fmt wants a literal format string.
      if (stop && signalled) {
        info0("stopped by a signal after step {}{}; resume with --resume auto", step,
              agent_lost ? " (a torchrun agent of this job has died, and the ranks it started with it)" : "");
        summary.agent_lost = agent_lost;
        summary.stopped_by = "a signal";
      } else if (stop) {
        info0(
            "train.exit_duration_mins {}: stopped after step {}, {:.1f} minutes in; resume with --resume auto to "
            "continue",
            t.exit_duration_mins, step, seconds_since(job_start_) / 60.0);
        summary.stopped_by = "train.exit_duration_mins";
      } else {
        info0("train.exit_after {}: stopped; resume with --resume auto to continue", step);
        summary.stopped_by = "train.exit_after";
      }
    }
  }
  watchdog_->pause();
  checkpointer_->finish_pending();
  if (!guard_.state_trusted()) throw DivergenceError(guard_.report(true) + "; " + checkpointer_->set_aside_diverged());
  if (config_.log.trace) {
    const std::string trace = run_dir_ + "/trace_rank" + std::to_string(groups_.rank()) + ".json";
    std::filesystem::remove(trace);  // an earlier run's in this run directory is not this one's
    sync_->write_trace(trace, summary.last_step);
    if (!std::filesystem::exists(trace))  // only the bucketed dp reduction records events
      warn0("log.trace: no trace written; this layout reduces no gradient buckets (dp 1, or ZeRO 2 or 3)");
  }
  summary.diagnosis = clock_.diagnose(groups_.world_comm(), groups_.coords().pp, config_);
  summary.steps = summary.last_step - state.step;
  summary.seconds = seconds_since(start);
  summary.tokens_per_s = summary.steps > 1 ? static_cast<double>(tokens_per_step * (summary.steps - 1)) / timed_seconds
                                           : static_cast<double>(tokens_per_step) / summary.seconds;
  return summary;
}

}  // namespace loom::launch
