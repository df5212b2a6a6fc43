// A model parameter as the parallel machinery sees it: its global name, this
// rank's part of it, and how that part relates to the tp group.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace loom::parallel {

struct ParallelParameter {
  std::string name;           // global name, the same at every layout ("h.0.attn.qkv.weight")
  torch::Tensor tensor;       // this rank's part
  int64_t tp_split_dim = -1;  // the dimension split across tp; -1: every tp rank holds all of it
  // Replicated across tp but fed by sequence-split activations, so each tp
  // rank holds a partial gradient that must be summed over tp.
  bool sequence_parallel = false;
  // A copy of a parameter that another pipeline stage owns (GPT's output layer
  // on the last stage holds the tied word embedding): trained like the owner's
  // copy, but counted once in norms and saved once.
  bool tied_copy = false;
  // One of the MoE experts this rank holds: experts are spread over the ep
  // group, so the parameter is replicated over expert-dp (dp / ep ranks), not
  // over dp, and its gradient is reduced there.
  bool expert = false;
  // The whole tensor's shape when it is not this part's shape times tp along
  // tp_split_dim (a vocabulary padded to a multiple of tp: the padding is not saved).
  std::vector<int64_t> global_shape = {};

  // The whole tensor's shape, for a tp group of TP_SIZE ranks.
  std::vector<int64_t> global_shape_for(int64_t tp_size) const {
    if (!global_shape.empty()) return global_shape;
    auto shape = tensor.sizes().vec();
    if (tp_split_dim >= 0) shape[static_cast<size_t>(tp_split_dim)] *= tp_size;
    return shape;
  }

  bool tp_replicated() const { return tp_split_dim < 0; }
  // Whether this rank's copy counts in a sum over the whole model (the gradient norm, a
  // checkpoint): a tp-replicated parameter on tp rank 0 only, a tied copy at its owner only.
  bool counted_on(int64_t tp_rank) const { return !(tp_replicated() && tp_rank != 0) && !tied_copy; }
};

}  // namespace loom::parallel
