// The boundaries of tensor-parallel regions, each an autograd function whose
// backward is its forward's dual (Megatron-LM's mappings). TP is the tp group.
//
//   copy_to_tp_region            forward identity        backward all-reduce
//   reduce_from_tp_region        forward all-reduce      backward identity
//   scatter_to_tp_region         forward keep own slice  backward all-gather   (last dim)
//   gather_from_tp_region        forward all-gather      backward keep slice   (last dim)
//
// With sequence parallelism the activations between regions are split along
// the sequence (dim 1 of [B, S, H]):
//
//   scatter_to_sequence_region          forward keep own slice  backward all-gather
//   gather_from_sequence_region         forward all-gather      backward reduce-scatter
//   reduce_scatter_to_sequence_region   forward reduce-scatter  backward all-gather
//   gather_sequence_to_replicated_region forward all-gather     backward keep own slice
//
// The last enters a region that computes the same on every tp rank from the whole sequence (an
// MoE layer whose experts are split over tp), so each rank's gradient is already the whole one.
//
// In a group of one rank every function is the identity.
#pragma once

#include <torch/torch.h>

#include "parallel/communicator.h"

namespace loom::parallel {

torch::Tensor copy_to_tp_region(const torch::Tensor& x, Communicator& tp);
torch::Tensor reduce_from_tp_region(const torch::Tensor& x, Communicator& tp);
torch::Tensor scatter_to_tp_region(const torch::Tensor& x, Communicator& tp);
torch::Tensor gather_from_tp_region(const torch::Tensor& x, Communicator& tp);

torch::Tensor scatter_to_sequence_region(const torch::Tensor& x, Communicator& tp);
torch::Tensor gather_from_sequence_region(const torch::Tensor& x, Communicator& tp);
torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, Communicator& tp);
torch::Tensor gather_sequence_to_replicated_region(const torch::Tensor& x, Communicator& tp);

// The collectives the region functions are built from, along any dimension.
torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, Communicator& comm);
torch::Tensor reduce_scatter_along(const torch::Tensor& x, int64_t dim, Communicator& comm);
torch::Tensor slice_along(const torch::Tensor& x, int64_t dim, const Communicator& comm);

}  // namespace loom::parallel
