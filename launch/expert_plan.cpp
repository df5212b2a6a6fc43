#include "launch/expert_plan.h"

#include <algorithm>

#include "core/precision.h"
#include "models/gpt_shapes.h"
#include "models/moe.h"

namespace loom::launch {

ExpertPlan expert_plan(const Config& config, int64_t world, int64_t ep) {
  const auto& m = config.model;
  const auto& p = config.parallel;
  ExpertPlan plan;
  plan.ep = ep;
  for (int64_t layer = 0; layer < m.num_layers; ++layer) plan.moe_layers += models::is_moe_layer(m.moe, layer);
  plan.experts_per_rank = m.moe.num_experts / ep;
  // The busiest pipeline stage's MoE blocks (contiguous blocks per stage; dense first blocks and
  // mlp_only_layers leave the stages uneven).
  const int64_t per_stage = (m.num_layers + p.pp - 1) / p.pp;
  int64_t busiest = 0;
  for (int64_t first = 0; first < m.num_layers; first += per_stage) {
    int64_t here = 0;
    for (int64_t layer = first; layer < std::min(m.num_layers, first + per_stage); ++layer)
      here += models::is_moe_layer(m.moe, layer);
    busiest = std::max(busiest, here);
  }
  const double layers_here = static_cast<double>(busiest);
  plan.expert_parameters =
      layers_here * static_cast<double>(plan.experts_per_rank) * static_cast<double>(models::moe_expert_numel(config));
  const bool mixed = config.train.precision != TrainPrecision::fp32;
  plan.expert_state_bytes = plan.expert_parameters * (mixed ? 18.0 : 16.0);
  const int64_t dp = std::max<int64_t>(1, world / (p.tp * p.cp * p.pp));
  plan.routed_tokens = static_cast<double>(config.train.global_batch_size * m.seq_len) /
                       static_cast<double>(dp * p.cp * (p.sequence_parallel ? p.tp : 1));
  const double activation = static_cast<double>(c10::elementSize(Precision::of(config.train.precision).activations));
  const double leaving = static_cast<double>(ep - 1) / static_cast<double>(ep);
  // Dispatch and combine in forward and in backward; full recomputation runs the forward's again.
  const double exchanges = config.train.recompute == Recompute::full ? 6.0 : 4.0;
  plan.all_to_all_bytes = layers_here * exchanges * plan.routed_tokens * static_cast<double>(m.moe.top_k) * leaving *
                          static_cast<double>(m.hidden_size) * activation;
  return plan;
}

std::vector<int64_t> expert_parallel_degrees(const Config& config, int64_t world) {
  const auto& p = config.parallel;
  const int64_t rest = std::max<int64_t>(1, world / (p.tp * p.cp * p.pp));
  std::vector<int64_t> degrees;
  for (int64_t ep = 1; ep <= rest; ++ep)
    if (rest % ep == 0 && config.model.moe.num_experts % ep == 0) degrees.push_back(ep);
  return degrees;
}

}  // namespace loom::launch
