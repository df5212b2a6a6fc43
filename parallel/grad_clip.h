// Clipping by the global gradient norm. Each rank adds the squares of the
// gradients it owns: every tp shard counts, a tp-replicated parameter counts
// on tp rank 0 only. The sum is all-reduced over the model-parallel group, so
// the norm is the whole model's whatever the layout.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "parallel/communicator.h"
#include "parallel/parallel_parameter.h"

namespace loom::parallel {

// SHARDS: the group over which gradients are sharded (ZeRO-2: each rank's
// gradients are zero outside its shard), whose partial sums are added too.
// MoE experts differ across the ep group: their squares are summed over EP
// (and over EXPERT_SHARDS, their ZeRO-2 group) before the model-parallel sum.
// Every rank of a job passes the same groups, so the collectives line up.
// Returns the global norm before clipping; scales the gradients when MAX_NORM > 0 and the norm exceeds it.
struct ExpertGroups {
  Communicator* ep = nullptr;
  Communicator* shards = nullptr;
};
double clip_grad_norm(const std::vector<ParallelParameter>& params, double max_norm, Communicator& model_parallel,
                      int64_t tp_rank, Communicator* shards = nullptr, ExpertGroups experts = {});

// ZeRO-2/3 by units: COUNTED are this rank's pieces of the gradients that
// count in the norm (parts of its shards), GRADS all its shard gradients; the
// squares are summed over SHARDS, then over MODEL_PARALLEL. MoE experts'
// pieces, EXPERT_COUNTED, are summed over EXPERTS.shards and EXPERTS.ep first.
double clip_sharded_grad_norm(const std::vector<torch::Tensor>& counted, const std::vector<torch::Tensor>& grads,
                              double max_norm, Communicator& model_parallel, Communicator& shards,
                              const std::vector<torch::Tensor>& expert_counted = {}, ExpertGroups experts = {});

}  // namespace loom::parallel
