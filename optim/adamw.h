// AdamW with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW
// computes it. Weight decay applies to matrices only: biases and norm weights
// (one-dimensional tensors) are not decayed.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// One AdamW update of P in place, elementwise, from gradient G and moments M, V.
// Shared by the plain and the sharded optimizer so that both compute alike.
void adamw_update(torch::Tensor p, const torch::Tensor& g, torch::Tensor m, torch::Tensor v, bool decay, double lr,
                  int64_t step, const AdamWOptions& options);

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<torch::Tensor> params, AdamWOptions options);
  // One update with learning rate LR from the gradients now in the parameters.
  void step(double lr) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(int64_t steps) override { steps_ = steps; }
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) override { return {exp_avg_[i], exp_avg_sq_[i]}; }
  void set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) override;
  int64_t state_bytes() const override;
  const std::vector<torch::Tensor>& params() const { return params_; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<bool> decay_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
