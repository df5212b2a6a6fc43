#include "launch/gradient_sync_options.h"

#include <algorithm>

#include "parallel/pipeline_schedule.h"

namespace loom::launch {

parallel::GradientSyncOptions gradient_sync_options(const Config& config, const Precision& precision) {
  const auto& p = config.parallel;
  parallel::GradientSyncOptions options;
  options.zero_stage = p.zero_stage;
  options.micro_batches = config.micro_batches_per_step();
  // 0: one bucket; any positive size at least a byte (each parameter then a bucket of its own).
  options.bucket_bytes = p.bucket_mb > 0 ? std::max<int64_t>(1, static_cast<int64_t>(p.bucket_mb * 1024 * 1024)) : 0;
  options.reduce_dtype = p.grad_reduce_dtype == GradReduceDtype::bf16 ? torch::kBFloat16 : torch::kFloat;
  options.model_dtype = precision.params;
  options.experts = config.model.moe.enabled();
  options.whole_gradients_needed = config.train.optimizer == OptimizerKind::muon;
  options.split_backward = parallel::splits_backward(p.schedule);
  options.compression.kind = p.grad_compression;
  options.compression.error_feedback = p.grad_compression_error_feedback;
  options.compression.powersgd_rank = p.powersgd.rank;
  options.compression.powersgd_start_step = p.powersgd.start_step;
  options.compression.seed = static_cast<uint64_t>(config.train.seed);
  // Copies of a parameter outside the dp group: tp-replicated ones, the tied embedding at pp > 1.
  options.compression.int8_blocks_per_parameter = p.tp > 1 || p.pp > 1;
  return options;
}

}  // namespace loom::launch
