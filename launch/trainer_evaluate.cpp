// What a step reads, and the validation loss: this rank's part of a micro-batch (its cp slice, on
// its device, the targets data.eod_mask_loss leaves out set to ignore_index), and the evaluation
// over eval.steps global batches of the validation data.
#include "core/logging.h"
#include "core/loss_mask.h"
#include "launch/trainer.h"
#include "parallel/ring_attention.h"

namespace loom::launch {

Batch Trainer::this_rank_part(Batch batch) {
  mask_targets_after_eod(batch, data_->eod_id());  // (before the cp split: a slice may start after an EOD)
  const int64_t cp = groups_.cp().size();
  if (cp > 1) {
    const int64_t rank = groups_.coords().cp;
    batch = {parallel::context_parallel_slice(batch.tokens, cp, rank).contiguous(),
             parallel::context_parallel_slice(batch.targets, cp, rank).contiguous()};
  }
  if (!device_.is_cpu()) {
    // From pinned memory without waiting: from pageable memory the host waits for the GPU's last micro-batch.
    batch.tokens = batch.tokens.pin_memory().to(device_, /*non_blocking=*/true);
    batch.targets = batch.targets.pin_memory().to(device_, /*non_blocking=*/true);
  }
  return batch;
}

bool Trainer::evaluates_at(int64_t step) const {
  if (!data_->valid()) return false;
  const int64_t interval = config_.eval.interval;
  return step == config_.train.steps || (interval > 0 && step % interval == 0);
}

double Trainer::evaluate(int64_t step) {
  const auto& t = config_.train;
  const BlendedSampler& valid = *data_->valid();
  const int64_t micro_batches = config_.micro_batches_per_step();
  const int64_t last_chunk = config_.parallel.virtual_stages - 1;
  const bool holds_loss = groups_.coords().pp == config_.parallel.pp - 1;
  torch::NoGradGuard no_grad;
  for (auto& chunk : chunks_) chunk->eval();
  sync_->gather_all();  // ZeRO-3 keeps only shards between steps
  auto loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (int64_t batch_index = 0; batch_index < config_.eval.steps; ++batch_index) {
    // Split over dp and micro-batches exactly as a training step's global batch is.
    const int64_t consumed = batch_index * t.global_batch_size;
    watchdog_->start(step, "evaluating (a validation batch)");
    pipeline_->run_forward([&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
      const int64_t first = micro_batch_start(consumed, t.global_batch_size, config_.parallel.dp, groups_.coords().dp,
                                              t.micro_batch_size, micro);
      Batch batch = this_rank_part(valid.batch(first, t.micro_batch_size));
      auto out = chunks_[static_cast<size_t>(chunk)]->forward(input.defined() ? input : batch.tokens, batch.targets);
      if (holds_loss && chunk == last_chunk) loss_sum += models::require_scalar_loss(out).to(torch::kFloat64);
      return out;
    });
  }
  sync_->release_all(/*loaded=*/false);
  for (auto& chunk : chunks_) chunk->train();
  // With data.eod_mask_loss, the mean over the targets left in all eval.steps global batches.
  const double counted = counted_target_factor(valid, 0, config_.eval.steps * t.global_batch_size, data_->eod_id());
  if (counted == 0.0)
    warn0("every validation target follows token {} (data.eod_mask_loss): the validation loss 0 counts nothing",
          data_->eod_id());
  // The last stage's mean reaches its pipeline (the others add zeros), then the mean over dp and cp, as in training.
  auto loss =
      (holds_loss ? loss_sum * (counted / static_cast<double>(micro_batches * config_.eval.steps)) : loss_sum).cpu();
  groups_.pp().all_reduce(loss).wait();
  groups_.dp_cp().all_reduce(loss).wait();
  return loss.item<double>() / static_cast<double>(groups_.dp_cp().size());
}

}  // namespace loom::launch
