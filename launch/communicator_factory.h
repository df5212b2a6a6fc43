// The communicators a job's ranks talk through, by device: NCCL for GPUs, Gloo for
// CPUs. Shared by `loom train` and `loom generate`.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>

#include "parallel/comm_stats.h"
#include "parallel/launch_env.h"
#include "parallel/process_groups.h"

namespace loom::launch {

parallel::CommunicatorFactory communicator_factory(const parallel::LaunchEnv& env, const torch::Device& device,
                                                   const std::shared_ptr<parallel::CommStats>& stats,
                                                   std::chrono::milliseconds timeout);

}  // namespace loom::launch
