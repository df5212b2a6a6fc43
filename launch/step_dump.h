// What `loom verify` compares (launch/verify.h): each rank's reduced gradients of a run's first
// step, and its weights after that step's update, by global name, with how each tensor is split
// over the layout. One safetensors file per rank and kind, and one JSON description per rank.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/config.h"
#include "parallel/parallel_parameter.h"
#include "parallel/process_groups.h"

namespace loom::launch {

// Writes DIR/KIND_rank_R.safetensors (KIND: "gradients" or "weights"): TENSORS[i] under
// PARAMS[i]'s global name (tied copies left out), in fp32; with the gradients also
// DIR/rank_R.json: the rank's coordinates and each parameter's split (tp dimension, whole shape,
// expert, summed over tp).
void write_rank_tensors(const std::string& dir, const std::string& kind,
                        const std::vector<parallel::ParallelParameter>& params,
                        const std::vector<torch::Tensor>& tensors, const parallel::ProcessGroups& groups);

// "gradients_rank_00003.safetensors", "rank_00003.json".
std::string rank_tensor_file(const std::string& kind, int64_t rank);
std::string rank_description_file(int64_t rank);

}  // namespace loom::launch
