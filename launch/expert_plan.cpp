#include "launch/expert_plan.h"

#include <algorithm>

#include "core/precision.h"
#include "models/gpt_shapes.h"
#include "models/moe.h"

namespace loom::launch {

namespace {

// The ranks a tp x cp x pp layout leaves on WORLD: dp.
int64_t data_parallel(const Config& config, int64_t world) {
  const auto& p = config.parallel;
  return std::max<int64_t>(1, world / (p.tp * p.cp * p.pp));
}

// The most MoE blocks one pp rank holds: pipeline rank s holds the pieces chunk x pp + s of
// num_layers / (pp x virtual_stages) blocks each, as models/gpt.cpp splits them (dense first
// blocks and mlp_only_layers leave the ranks uneven).
int64_t busiest_stage_moe_blocks(const Config& config) {
  const auto& m = config.model;
  const auto& p = config.parallel;
  const int64_t per_piece = m.num_layers / (p.pp * p.virtual_stages);
  int64_t busiest = 0;
  for (int64_t stage = 0; stage < p.pp; ++stage) {
    int64_t here = 0;
    for (int64_t chunk = 0; chunk < p.virtual_stages; ++chunk) {
      const int64_t first = (chunk * p.pp + stage) * per_piece;
      for (int64_t layer = first; layer < first + per_piece; ++layer) here += models::is_moe_layer(m.moe, layer);
    }
    if (stage == p.pp - 1) {  // the last stage also runs the multi-token prediction modules' blocks
      for (int64_t layer = m.num_layers; layer < m.num_layers + m.mtp.depth; ++layer)
        here += models::is_moe_layer(m.moe, layer);
    }
    busiest = std::max(busiest, here);
  }
  return busiest;
}

}  // namespace

ExpertPlan expert_plan(const Config& config, int64_t world, int64_t ep) {
  const auto& m = config.model;
  const auto& p = config.parallel;
  ExpertPlan plan;
  plan.ep = ep;
  plan.dp = data_parallel(config, world);
  for (int64_t layer = 0; layer < m.num_layers + m.mtp.depth; ++layer)
    plan.moe_layers += models::is_moe_layer(m.moe, layer);
  plan.experts_per_rank = m.moe.num_experts / ep;
  const double layers_here = static_cast<double>(busiest_stage_moe_blocks(config));
  const auto split = static_cast<double>(p.expert_tp);
  plan.expert_parameters = layers_here * static_cast<double>(plan.experts_per_rank) *
                           static_cast<double>(models::moe_expert_numel(config)) / split;
  const bool mixed = config.train.precision != TrainPrecision::fp32;
  plan.expert_state_bytes = plan.expert_parameters * (mixed ? 18.0 : 16.0);
  plan.routed_tokens = static_cast<double>(config.train.global_batch_size * m.seq_len) /
                       static_cast<double>(plan.dp * p.cp * (p.sequence_parallel && p.expert_tp == 1 ? p.tp : 1));
  const double activation = static_cast<double>(c10::elementSize(Precision::of(config.train.precision).activations));
  const double leaving = static_cast<double>(ep - 1) / static_cast<double>(ep);
  // Dispatch and combine in forward and in backward; full recomputation runs the forward's again.
  const double exchanges = config.train.recompute == Recompute::full ? 6.0 : 4.0;
  const double row = static_cast<double>(m.hidden_size) * activation;
  plan.all_to_all_bytes =
      layers_here * exchanges * plan.routed_tokens * static_cast<double>(m.moe.top_k) * leaving * row;
  const double micro_batches = static_cast<double>(config.train.global_batch_size) /
                               static_cast<double>(std::max<int64_t>(1, config.train.micro_batch_size * plan.dp));
  // Each forward pass also exchanges the per-expert row counts first (parallel/moe_dispatch.cpp).
  const double forwards = config.train.recompute == Recompute::full ? 2.0 : 1.0;
  plan.all_to_all_calls = layers_here * (exchanges + forwards) * micro_batches;
  if (p.expert_tp > 1) {
    // A ring all-reduce sends 2 (t - 1) / t of the tensor, an all-gather (t - 1) / t of the whole:
    // one of each kind in forward and one in backward, and the forward's again under full recomputation.
    const double passes = config.train.recompute == Recompute::full ? 3.0 : 2.0;
    const double share = (split - 1.0) / split;
    const double sums = 2.0 * share * plan.routed_tokens * static_cast<double>(m.moe.top_k) * row;
    const double gathers = p.sequence_parallel ? share * plan.routed_tokens * row : 0.0;
    plan.expert_tp_bytes = layers_here * passes * (sums + gathers);
  }
  return plan;
}

std::vector<int64_t> expert_parallel_degrees(const Config& config, int64_t world) {
  const int64_t dp = data_parallel(config, world);
  std::vector<int64_t> degrees;
  for (int64_t ep = 1; ep <= dp; ++ep)
    if (dp % ep == 0 && config.model.moe.num_experts % ep == 0) degrees.push_back(ep);
  return degrees;
}

}  // namespace loom::launch
