// The collectives loom's trainer issues for the GPT in one optimizer step, per
// rank: calls and payload bytes (CommStats' conventions) per group kind and
// op, worked out from the config alone. `loom plan --run` sets them beside a
// run's counters, and the traffic test checks they are equal, call for call
// and byte for byte, so the cost model and the code cannot drift apart.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "parallel/rank_grid.h"

namespace loom::models {

struct PredictedTraffic {
  int64_t calls = 0;
  int64_t bytes = 0;
};

// (group kind, op) -> per step, for the rank at COORDS of a resolved CONFIG
// (fp32 activations and gradients). Groups of one rank are left out, as the counters leave them out.
std::map<std::pair<std::string, std::string>, PredictedTraffic> predict_gpt_step_traffic(
    const Config& config, const parallel::RankCoords& coords);

// What a run started with --resume adds, once: ZeRO-3 gathers every unit's parameters (in the model's
// dtype), and ZeRO-2/3 under mixed precision their fp32 master weights, for the checkpoint to be read
// into (whether or not one is found).
std::map<std::pair<std::string, std::string>, PredictedTraffic> predict_gpt_resume_traffic(
    const Config& config, const parallel::RankCoords& coords);

// What one checkpoint save adds (ZeRO gathers the sharded moments).
std::map<std::pair<std::string, std::string>, PredictedTraffic> predict_gpt_checkpoint_traffic(
    const Config& config, const parallel::RankCoords& coords);

// The sizes of the parameters this rank holds, in the trainer's order (order of use).
std::vector<int64_t> gpt_local_parameter_sizes(const Config& config, const parallel::RankCoords& coords);

// Parameters this rank holds (its tp shard of its pipeline pieces), the tied copy included.
int64_t gpt_local_parameters(const Config& config, const parallel::RankCoords& coords);

}  // namespace loom::models
