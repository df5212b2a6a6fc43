// ZeRO-3 and full activation recomputation applied to a model from outside, to
// the blocks it declares (models/block_stack.h), as torchtitan applies
// fully_shard and activation checkpointing to a model's layers: the model's
// code knows of neither.
#pragma once

#include <ATen/core/Generator.h>

#include <memory>
#include <vector>

#include "models/language_model.h"
#include "parallel/fully_sharded.h"
#include "parallel/parallel_parameter.h"

namespace loom::launch {

// For each of PARAMS, the layer of the declared block of PIECES that holds it; -1 outside every block.
std::vector<int64_t> block_of_parameters(const std::vector<std::shared_ptr<models::LanguageModel>>& pieces,
                                         const std::vector<parallel::ParallelParameter>& params);

// Wraps every block of STACK: full recomputation innermost (when RECOMPUTE_FULL; its
// replayed dropout draws from SPLIT_GENERATOR too), ZeRO-3's gather and
// reduce-scatter around it (when UNITS).
void wrap_blocks(models::BlockStackImpl& stack, parallel::FullyShardedParameters* units, bool recompute_full,
                 at::Generator* split_generator);

}  // namespace loom::launch
