// What expert parallelism costs an MoE model, for `loom plan`: the routed experts' parameters and
// model state each rank holds at an ep degree, and the all-to-all bytes each rank sends per step
// when the router spreads the choices evenly over the experts. Pure arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"

namespace loom::launch {

struct ExpertPlan {
  int64_t ep = 1;
  int64_t dp = 1;                 // world / (tp cp pp); ep divides it
  int64_t moe_layers = 0;         // of the whole model
  int64_t experts_per_rank = 0;   // of each MoE block: num_experts / ep
  double expert_parameters = 0;   // routed experts' parameters on one rank (of the busiest pp rank)
  double expert_state_bytes = 0;  // their parameters, gradients and AdamW state, unsharded
  double routed_tokens = 0;       // tokens one rank routes per step (its share of the global batch)
  double all_to_all_bytes = 0;    // one rank's sends per step: dispatch + combine, forward + backward
  double all_to_all_calls = 0;    // all-to-alls a step: those, and each forward's exchange of row counts
  // Expert tensor parallelism (parallel.expert_tp = tp > 1): one rank's sends per step for the sums
  // over tp of the expert outputs (forward) and inputs' gradients (backward), ring all-reduces, and
  // under sequence parallelism the gathers of the sequence and of its output's gradient.
  double expert_tp_bytes = 0;
};

// The plan at EP for the layout of CONFIG's parallel section on WORLD ranks: dp = WORLD / (tp cp
// pp); one rank routes global_batch x seq_len / (dp cp) tokens a step (and 1 / tp of them under
// sequence parallelism without expert_tp, else every tp rank routes the same ones). Experts split
// over tp (expert_tp) hold 1 / tp of their parameters on each rank. Even routing sends the share
// (ep - 1) / ep of each rank's top_k choices of a token's hidden vector to other ranks, once to
// dispatch and once to combine, and as much again in backward (and in the recomputed forward under
// full recomputation), in the activations' dtype, in each MoE block of the busiest pp stage. State bytes: 4 + 4 + 8 per
// parameter in fp32, 2 + 4 + 4 + 8 under bf16 (loom's master weights), before ZeRO shards them over expert-dp.
ExpertPlan expert_plan(const Config& config, int64_t world, int64_t ep);

// Every ep that divides both num_experts and the ranks left after tp, cp and pp (1 included).
std::vector<int64_t> expert_parallel_degrees(const Config& config, int64_t world);

}  // namespace loom::launch
