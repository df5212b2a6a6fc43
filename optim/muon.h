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
#include "parallel/communicator.h"

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

// Where Muon's weights lie across ranks. The orthogonalisation needs each logical matrix whole:
//  - tp: a weight split across TP (TP_SPLIT_DIM[i] >= 0) has its update U gathered whole there,
//    orthogonalised on every tp rank alike (Megatron-LM's "duplicated" mode) and cut back to
//    this rank's part; the momentum stays a shard;
//  - ZeRO-1: each weight is owned by one rank of OWNERS (parallel/layer_ownership.h: whole
//    matrices, balanced by Newton-Schulz cost), which keeps its momentum, updates it and broadcasts the result.
struct MuonSharding {
  parallel::Communicator* tp = nullptr;
  std::vector<int64_t> tp_split_dim;  // per parameter; empty: every weight whole on its tp rank
  parallel::Communicator* owners = nullptr;
};

class Muon : public Optimizer {
 public:
  Muon(std::vector<torch::Tensor> params, std::vector<MatrixSplit> splits, MuonOptions options,
       MuonSharding sharding = {});
  void step(double lr) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(int64_t steps) override { steps_ = steps; }
  // The momentum buffer as the first moment; Muon has no second (zeros, so checkpoints keep their form).
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) override;
  void set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) override;
  void gather_moments() override;
  void release_moments() override;
  int64_t state_bytes() const override;
  // The rank of the owners' group that updates parameter I (0 without ZeRO).
  int64_t owner(size_t i) const { return owner_[i]; }

 private:
  bool owns(size_t i) const;
  // U (this rank's part of parameter I's update direction) orthogonalised whole, this rank's part of it.
  torch::Tensor orthogonal_part(size_t i, const torch::Tensor& u);

  std::vector<torch::Tensor> params_, momentum_, gathered_;  // momentum_: owned weights only
  std::vector<MatrixSplit> splits_;
  MuonOptions options_;
  MuonSharding sharding_;
  std::vector<int64_t> owner_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
