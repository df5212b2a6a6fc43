// Data parallelism as the foundation does it: after backward, every gradient is
// averaged over the dp group. The gradients are packed into one flat buffer so
// the whole model costs a single all-reduce (bucketing and overlap come later).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "parallel/communicator.h"

namespace loom::parallel {

class GradientAverager {
 public:
  explicit GradientAverager(std::vector<torch::Tensor> params);
  // Sums the gradients over COMM and divides by its size, in place.
  void average(Communicator& comm);

 private:
  std::vector<torch::Tensor> params_;
  torch::Tensor flat_;  // reused every step
};

}  // namespace loom::parallel
