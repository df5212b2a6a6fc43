#include "launch/dp_passes.h"

#include "models/gpt_shapes.h"
#include "parallel/pipeline_schedule.h"

namespace loom::launch {

double block_parameter_fraction(const Config& config) {
  double blocks = 0;
  auto add = [&](int64_t layer) {
    for (const auto& p : models::gpt_block_parameters(config, layer)) blocks += static_cast<double>(p.numel());
  };
  if (config.model.moe.enabled()) {
    for (int64_t layer = 0; layer < config.model.num_layers; ++layer) add(layer);
  } else {
    add(0);  // every block alike
    blocks *= static_cast<double>(config.model.num_layers);
  }
  return blocks / static_cast<double>(models::model_num_parameters(config));
}

DpWireBytes dp_wire_bytes(const Config& config, int64_t zero_stage) {
  DpWireBytes wire;
  if (zero_stage <= 1 && config.parallel.grad_reduce_dtype == GradReduceDtype::bf16) wire.grad = 2;
  if (zero_stage >= 2 && config.train.precision != TrainPrecision::fp32) wire.param = 2;
  return wire;
}

// Blocks reduce MICRO_BATCHES times (once under a split backward) and ZeRO-3 gathers them twice
// as often; the rest, once a step.
DpPasses dp_passes(const Config& config, int64_t zero_stage, int64_t pp, int64_t micro_batches, double block_share,
                   double buckets, double muon_share) {
  const int64_t layers = config.model.num_layers / pp;
  const bool muon = config.train.optimizer == OptimizerKind::muon;
  const double m = static_cast<double>(micro_batches), root = 1.0 - block_share;
  switch (zero_stage) {
    case 0: return {2, 0, 2 * buckets, 0, 1, buckets};
    case 1:
      return muon ? DpPasses{2, 1 + muon_share, 2 * buckets, 2 * buckets, 1, buckets}
                  : DpPasses{1, 1, buckets, buckets, 1, buckets};
    default: {
      const bool split = pp > 1 && parallel::splits_backward(config.parallel.schedule);
      const double reduces = split ? 1.0 : m, gathers = zero_stage == 3 ? 2.0 * m : 1.0;
      const double blocks = static_cast<double>(layers);
      const double reductions = block_share * reduces + root;
      DpPasses p{reductions, block_share * gathers + root, blocks * reduces + 1, blocks * gathers + 1,
                 reductions, blocks * reduces + 1};
      if (muon) p.grads += 2.0 * muon_share, p.grad_calls += 2.0 * blocks;
      return p;
    }
  }
}

double ring_passes_bytes(const DpPasses& passes, double grads, double params, int64_t p) {
  const double share = static_cast<double>(p - 1) / static_cast<double>(p);
  return share * (passes.grads * grads + passes.params * params);
}

double ring_passes_time(const DpPasses& passes, double grads, double params, int64_t p, double alpha, double beta) {
  return ring_passes_bytes(passes, grads, params, p) * beta +
         (passes.grad_calls + passes.param_calls) * static_cast<double>(p - 1) * alpha;
}

}  // namespace loom::launch
