// Gradient reductions over a group, as the foundation does them: after
// backward the gradients are packed into one flat buffer, so a whole model
// costs a single all-reduce (bucketing and overlap come later). Used for the
// data-parallel average and for the tp-sum of sequence-parallel gradients.
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
  // The mean over COMM.
  void average(Communicator& comm) { all_reduce(comm, 1.0 / static_cast<double>(comm.size())); }

 private:
  std::vector<torch::Tensor> params_;
  torch::Tensor flat_;  // reused every step
};

}  // namespace loom::parallel
