// Muon: momentum orthogonalised by a Newton-Schulz iteration (Jordan et al., 2024), scaled to
// AdamW's update RMS (Liu et al., 2025), for the 2-D weights inside the transformer blocks;
// AdamW keeps the embeddings, the output layer, norms, biases and routers
// (launch/make_optimizer.h chooses). Each step, for a weight W (m x n) with gradient G, after
// the global gradient clipping:
//   B <- mu B + G;  U <- G + mu B (Nesterov) or B;  X <- U / (||U||_F + 1e-7)
//   ns_steps x: A <- X X^T, X <- a X + (b A + c A A) X   (on X^T when m > n)
//   W <- W (1 - lr wd) - lr 0.2 sqrt(max(m, n)) X
// with (a, b, c) = (3.4445, -4.7750, 2.0315), in fp32. A weight that stores several logical
// matrices side by side (GPT-2's fused q, k, v per head) is orthogonalised matrix by matrix.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

struct MuonOptions {
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;
  double weight_decay = 0.0;
  double lr_scale = 1.0;  // the Muon group's peak over the schedule's: its lr is step(lr) x lr_scale
};

// X orthogonalised: normalised by its Frobenius norm, then STEPS of the quintic iteration
// (on X^T when X has more rows than columns). Its singular values end near 1.
torch::Tensor newton_schulz(const torch::Tensor& x, int64_t steps);

// How a stored weight holds its logical matrices: viewed as [groups, parts, rows, cols], part j
// of every group together is one matrix of groups x rows rows (loom's fused attention weights:
// q, k, v per head are groups = heads, parts = 3; k, v per kv head are parts = 2).
struct MatrixSplit {
  int64_t groups = 1;
  int64_t parts = 1;
};

// Muon over whole 2-D weights (every rank holds each of them whole: tp 1, no ZeRO sharding).
class Muon : public Optimizer {
 public:
  Muon(std::vector<torch::Tensor> params, std::vector<MatrixSplit> splits, MuonOptions options);
  void step(double lr) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(int64_t steps) override { steps_ = steps; }
  // The momentum buffer as the first moment; Muon has no second (zeros, so checkpoints keep their form).
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) override;
  void set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) override;
  int64_t state_bytes() const override;

 private:
  std::vector<torch::Tensor> params_, momentum_;
  std::vector<MatrixSplit> splits_;
  MuonOptions options_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
