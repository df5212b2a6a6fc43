// A gradient sum over a group in one flat all-reduce, after backward: the tp
// sum of sequence-parallel gradients and the embedding-group sum of the tied
// word embedding. The data-parallel reduction, which overlaps backward, is
// parallel/grad_buckets.h.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "parallel/communicator.h"

namespace loom::parallel {

class GradientReducer {
 public:
  explicit GradientReducer(std::vector<torch::Tensor> params);
  bool empty() const { return params_.empty(); }
  // Sums the gradients over COMM, scales them by SCALE, in place.
  void all_reduce(Communicator& comm, double scale = 1.0);

 private:
  std::vector<torch::Tensor> params_;
  torch::Tensor flat_;  // reused every step
};

// Sums PIECES (views, e.g. parts of ZeRO-3 gradient shards) over COMM in one flat all-reduce, in place.
void all_reduce_pieces(const std::vector<torch::Tensor>& pieces, Communicator& comm);

}  // namespace loom::parallel
