// A model parameter as the parallel machinery sees it: its global name, this
// rank's part of it, and how that part relates to the tp group.
#pragma once

#include <torch/torch.h>

#include <string>

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

  bool tp_replicated() const { return tp_split_dim < 0; }
};

}  // namespace loom::parallel
