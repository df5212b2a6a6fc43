// AdamW over what a gradient synchronisation owns, sharded the way its gradients lie:
// plain AdamW over whole gradients, ZeroAdamW over ZeRO-1's buckets, FullyShardedAdamW
// over ZeRO-2/3's units, one optimizer per part (dense, MoE experts) joined into one
// over the whole parameter list for the step loop and the checkpoints.
#pragma once

#include <memory>
#include <vector>

#include "optim/adamw.h"
#include "optim/optimizer.h"
#include "parallel/gradient_sync.h"

namespace loom::optim {

// AdamW for one of SYNC's optimizer parts; PARAMS: that part's parameter tensors.
std::unique_ptr<Optimizer> make_adamw_part(const parallel::OptimizerPart& part, std::vector<torch::Tensor> params,
                                           const AdamWOptions& options);

// AdamW over every parameter of SYNC (attached).
std::unique_ptr<Optimizer> make_adamw(parallel::GradientSync& sync, const AdamWOptions& options);

// PARTS (one optimizer per entry of SYNC_PARTS) as one optimizer over the whole list of N parameters.
std::unique_ptr<Optimizer> join_parts(std::vector<std::unique_ptr<Optimizer>> parts,
                                      const std::vector<parallel::OptimizerPart>& sync_parts, size_t n);

}  // namespace loom::optim
