// Dropout that is correct under tensor parallelism. In regions where every tp
// rank holds the same activations (replicated), the masks must agree, so they
// come from the default generator, seeded alike on all tp ranks. In regions
// split across tp (attention heads, sequence-parallel activations) each rank
// needs its own mask, drawn from a generator seeded per tp rank (Megatron-LM's
// "model-parallel RNG").
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <cstdint>

namespace loom::parallel {

class TensorParallelRng {
 public:
  // Seeds the default generator for the replicated regions and makes the split-region generator.
  // Pipeline stages hold different layers, so each draws its own streams too.
  TensorParallelRng(uint64_t seed, int64_t tp_rank, int64_t dp_rank, int64_t pp_rank = 0);
  at::Generator& split() { return split_; }
  // Both streams (the default generator's and the split one's), as bytes, for checkpoints.
  torch::Tensor state() const;
  void set_state(const torch::Tensor& state);

 private:
  at::Generator split_;
};

// Inverted dropout drawing its mask from GENERATOR (the default one when undefined).
torch::Tensor dropout(const torch::Tensor& x, double p, bool training, at::Generator* generator = nullptr);

}  // namespace loom::parallel
