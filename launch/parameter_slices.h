// Where each rank's part of a parameter sits in the whole tensor, and reading those parts: the one
// rule checkpoints, model.init_from and loom generate share, so that any layout reads what any
// other wrote.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallel/parallel_parameter.h"

namespace loom::launch {

// This rank's part of a parameter in the whole tensor: along its tp split dimension, from
// tp_rank * part, as far as the unpadded tensor goes (dim -1: the whole, a replicated parameter).
struct SliceSpec {
  int64_t dim = -1, offset = 0, length = 0;
};
SliceSpec slice_of(const parallel::ParallelParameter& p, int64_t tp_rank, int64_t tp_size);

// Reads into each parameter its slice of the whole tensor READ(name, dim,
// offset, length) returns (dim -1: whole). Throws InputError naming SOURCE
// when a tensor is missing or has another shape.
using GlobalSliceReader =
    std::function<std::optional<torch::Tensor>(const std::string& name, int64_t dim, int64_t offset, int64_t length)>;
void load_parameter_slices(const std::vector<parallel::ParallelParameter>& params,
                           const std::vector<torch::Tensor>& into, int64_t tp_rank, int64_t tp_size,
                           const GlobalSliceReader& read, const std::string& source);

}  // namespace loom::launch
