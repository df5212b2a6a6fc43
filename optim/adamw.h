// AdamW with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW
// computes it. Weight decay applies to matrices only: biases and norm weights
// (one-dimensional tensors) are not decayed.
//
// The parameters' storage moves into one flat buffer, matrices first, with the
// moments laid out alike (as Megatron-LM's and DeepSpeed's optimizers keep
// theirs), so that a step is two fused passes over flat memory, one decayed and
// one not, instead of a call per tensor. The modules keep their parameter
// objects; only where their data lives changes.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "optim/optimizer.h"
#include "parallel/flat_layout.h"

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
  // PARAMS are flattened when each is a contiguous fp32 tensor with a storage of its
  // own, all on one device; otherwise each keeps its storage and is updated alone.
  AdamW(std::vector<torch::Tensor> params, AdamWOptions options);
  // Gives every parameter a .grad that is a view into one flat buffer laid out as the
  // parameters are (values kept), which the step then reads in its flat passes. For
  // parameters whose gradients nobody else places (no data-parallel buckets).
  void use_flat_gradients();
  // Whether the parameters (and moments) live in one flat buffer.
  bool flat() const { return flat_params_.defined(); }
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
  // Parameter I's place in FLAT (one of the flat buffers), shaped as the parameter.
  torch::Tensor slot(const torch::Tensor& flat, size_t i) const;
  // Whether every gradient is still the view into flat_grads_ that use_flat_gradients() made.
  bool gradients_are_flat() const;

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<bool> decay_;
  torch::Tensor flat_params_, flat_grads_, flat_exp_avg_, flat_exp_avg_sq_;
  parallel::FlatLayout layout_;   // the flat buffers: matrices (decayed) first, then the rest
  std::vector<size_t> position_;  // each parameter's place in layout_
  int64_t decayed_numel_ = 0;     // the decayed parameters fill [0, decayed_numel_)
  AdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
