#include "launch/dp_passes.h"

#include <algorithm>
#include <cmath>

#include "core/muon_groups.h"
#include "models/gpt_shapes.h"
#include "models/moe.h"
#include "parallel/grad_buckets.h"
#include "parallel/pipeline_schedule.h"

namespace loom::launch {
namespace {

using Shapes = std::vector<models::ParameterShape>;

double numel_of(const Shapes& shapes) {
  double n = 0;
  for (const auto& p : shapes) n += static_cast<double>(p.numel());
  return n;
}

// How many of SHAPES, and how many of their elements, Muon trains.
std::pair<double, double> muon_part(const Config& c, const Shapes& shapes) {
  double count = 0, numel = 0;
  if (c.train.optimizer != OptimizerKind::muon) return {0, 0};
  for (const auto& p : shapes) {
    if (!muon_trains(c.train.muon, p.name, static_cast<int64_t>(p.shape.size()))) continue;
    count += 1;
    numel += static_cast<double>(p.numel());
  }
  return {count, numel};
}

// The root unit's parameters: the input's, the output's and multi-token prediction's modules.
Shapes root_parameters(const Config& c) {
  Shapes root = models::gpt_input_parameters(c);
  for (auto& p : models::gpt_output_parameters(c)) root.push_back(std::move(p));
  return root;
}

// The dense parameters: the model less its routed experts (which go over expert-dp).
double dense_numel(const Config& c) {
  const auto& m = c.model;
  double experts = 0;
  for (int64_t layer = 0; layer < m.num_layers + m.mtp.depth; ++layer) {
    if (models::is_moe_layer(m.moe, layer))
      experts += static_cast<double>(m.moe.num_experts * models::moe_expert_numel(c));
  }
  return static_cast<double>(models::model_num_parameters(c)) - experts;
}

}  // namespace

DpWireBytes dp_wire_bytes(const Config& config, int64_t zero_stage) {
  DpWireBytes wire;
  if (zero_stage <= 1 && config.parallel.grad_reduce_dtype == GradReduceDtype::bf16) wire.grad = 2;
  if (zero_stage >= 2 && config.train.precision != TrainPrecision::fp32) wire.param = 2;
  return wire;
}

double heavier_end_stage(const Config& config, const std::function<double(const models::ParameterShape&)>& count) {
  const Shapes input = models::gpt_input_parameters(config);
  double first = 0, last = 0;
  for (const auto& p : input) first += count(p);
  for (const auto& p : models::gpt_output_parameters(config)) last += count(p);
  if (models::shares_word_embedding(config)) last += count(input.front());
  return std::max(first, last);
}

double block_parameter_fraction(const Config& config) {
  return 1.0 - numel_of(root_parameters(config)) / dense_numel(config);
}

DpModel dense_dp_model(const Config& config, int64_t tp, int64_t pp, int64_t micro_batches) {
  Config c = config;
  c.parallel.tp = tp;
  DpModel model;
  model.blocks = c.model.num_layers / pp;
  const Shapes block = models::gpt_block_parameters(c, 0), input = models::gpt_input_parameters(c);
  // A tp rank's share: tp splits the blocks' matrices and the embeddings, not the norms. (An MoE's
  // blocks are not block 0's dense shapes: its share is the whole model's.)
  const Shapes root = root_parameters(c);
  double block_local = 0, root_local = 0;
  for (const auto& p : block) block_local += static_cast<double>(p.local_numel(tp));
  for (const auto& p : root) root_local += static_cast<double>(p.local_numel(tp));
  block_local *= static_cast<double>(c.model.num_layers);
  if (pp > 1) {  // the heavier end stage's: a pp-th of the blocks and its own
    block_local /= static_cast<double>(pp);
    root_local = heavier_end_stage(c, [tp](const auto& p) { return static_cast<double>(p.local_numel(tp)); });
  }
  model.block_share = c.model.moe.enabled() ? block_parameter_fraction(c) : block_local / (block_local + root_local);
  // Stage 0's gradient buckets, as the trainer packs them: its parameters in order of use.
  std::vector<int64_t> bytes;
  for (const auto& p : input) bytes.push_back(p.local_numel(tp) * 4);
  for (int64_t b = 0; b < model.blocks; ++b) {
    for (const auto& p : block) bytes.push_back(p.local_numel(tp) * 4);
  }
  const auto bucket_bytes = static_cast<int64_t>(c.parallel.bucket_mb * 1024 * 1024);
  // The embedding held by the last stage too (tied, or multi-token prediction's) has a bucket of its own.
  std::vector<bool> alone(bytes.size(), false);
  alone[0] = pp > 1 && models::shares_word_embedding(c);
  model.buckets = static_cast<double>(parallel::GradientBuckets::plan(bytes, bucket_bytes, alone).size());
  // Muon: its weights, and the units that hold one (every block, if a block's do; the root when
  // train.muon.include names one of its weights or multi-token prediction's blocks are in it).
  const auto [block_weights, block_numel] = muon_part(c, block);
  const auto [root_weights, root_numel] = muon_part(c, root);
  const double layers = static_cast<double>(c.model.num_layers), stages = static_cast<double>(pp);
  model.muon_share = (block_numel * layers + root_numel) / dense_numel(c);
  model.muon_weights = (block_weights * layers + root_weights) / stages;
  model.muon_unit_share =
      (block_weights > 0 ? model.block_share : 0.0) + (root_weights > 0 ? 1 - model.block_share : 0.0);
  model.muon_units = (block_weights > 0 ? static_cast<double>(model.blocks) : 0.0) + (root_weights > 0 ? 1.0 : 0.0);
  model.split = pp > 1 && parallel::splits_backward(c.parallel.schedule);
  if (model.split) {
    double skipped = 0;
    for (int64_t stage = 0; stage < pp; ++stage)
      skipped +=
          static_cast<double>(parallel::passes_after_input_backward(c.parallel.schedule, stage, pp, micro_batches));
    model.split_skipped = skipped / stages;
  }
  return model;
}

DpPasses dp_passes(const Config& config, int64_t zero_stage, int64_t micro_batches, const DpModel& model) {
  const bool muon = config.train.optimizer == OptimizerKind::muon;
  const double m = static_cast<double>(micro_batches), b = model.block_share, root = 1.0 - b;
  const double blocks = static_cast<double>(model.blocks), buckets = model.buckets;
  switch (zero_stage) {
    case 0: return {2, 0, 2 * buckets, 0, 1, buckets, true};
    case 1:
      return muon ? DpPasses{2, 1 + model.muon_share, 2 * buckets, buckets + model.muon_weights, 1, buckets, true}
                  : DpPasses{1, 1, buckets, buckets, 1, buckets, false};
    default: {
      const double reduces = model.split ? 1.0 : m;
      // A block's gathers a step: stage 2, once; stage 3, every micro-batch's forward and backward,
      // less what the lowest block skips under a split backward.
      const double block_gathers = zero_stage == 3 ? blocks * 2.0 * m - model.split_skipped : blocks;
      const double reductions = b * reduces + root;
      DpPasses p{reductions,
                 b * block_gathers / blocks + root,
                 blocks * reduces + 1,
                 block_gathers + 1,
                 reductions,
                 blocks * reduces + 1,
                 false};
      if (muon) p.grads += 2.0 * model.muon_unit_share, p.grad_calls += 2.0 * model.muon_units;
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
