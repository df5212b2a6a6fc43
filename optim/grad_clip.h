// Clipping by the global gradient norm. Each rank adds the squares of the
// gradients it owns: every tp shard counts, a tp-replicated parameter counts
// on tp rank 0 only. The sum is all-reduced over the model-parallel group, so
// the norm is the whole model's whatever the layout.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "parallel/communicator.h"
#include "parallel/parallel_parameter.h"

namespace loom::optim {

// Returns the global norm before clipping; scales the gradients when MAX_NORM > 0 and the norm exceeds it.
double clip_grad_norm(const std::vector<parallel::ParallelParameter>& params, double max_norm,
                      parallel::Communicator& model_parallel, int64_t tp_rank);

}  // namespace loom::optim
