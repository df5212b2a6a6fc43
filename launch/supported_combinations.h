// What this build of loom can train, checked before anything is built: a config
// can be valid (core/config.h checks each key and their arithmetic) yet ask for a
// combination not implemented yet, or not on this device. Each refusal is an
// InputError (exit 2) naming the key.
#pragma once

#include <torch/torch.h>

#include "core/config.h"
#include "launch/commands.h"
#include "parallel/rank_grid.h"

namespace loom::launch {

void require_supported(const Config& config, const torch::Device& device, int64_t world);

// --inject-fault must name a rank of the job, and an overflow one of the last pipeline stage's ranks under fp16.
void check_fault_injection(const FaultInjection& fault, const Config& config, const parallel::RankGrid& grid);

}  // namespace loom::launch
