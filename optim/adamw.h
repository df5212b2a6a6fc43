// AdamW with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW
// computes it. Weight decay applies to matrices only: biases and norm weights
// (one-dimensional tensors) are not decayed.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace loom::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  AdamW(std::vector<torch::Tensor> params, AdamWOptions options);
  // One update with learning rate LR from the gradients now in the parameters.
  void step(double lr);
  void zero_grad();
  int64_t steps_taken() const { return steps_; }
  // The moments of params()[i], for checkpoints; a restore writes into them and sets the step count.
  torch::Tensor& exp_avg(size_t i) { return exp_avg_[i]; }
  torch::Tensor& exp_avg_sq(size_t i) { return exp_avg_sq_[i]; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  const std::vector<torch::Tensor>& params() const { return params_; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<bool> decay_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
