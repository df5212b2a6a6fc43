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
  torch::ScalarType ns_dtype = torch::kFloat;  // the iteration's dtype (train.muon.ns_dtype: fp32, or bf16)
};

// X orthogonalised: normalised by its Frobenius norm (in fp32), then STEPS of the quintic
// iteration in DTYPE (on X^T when X has more rows than columns); returned in fp32. Its singular
// values end near 1.
torch::Tensor newton_schulz(const torch::Tensor& x, int64_t steps, torch::ScalarType dtype = torch::kFloat);

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
//  - ZeRO: each weight is owned by one rank of OWNERS (parallel/layer_ownership.h: whole
//    matrices, balanced by Newton-Schulz cost), which keeps its momentum and computes its update.
//    tp peers share their dp rank, so they own (and gather) the same weights.
struct MuonSharding {
  parallel::Communicator* tp = nullptr;
  std::vector<int64_t> tp_split_dim;  // per weight; empty: every weight whole on its tp rank
  // Per weight, its whole shape when the tp parts put together are larger (a vocabulary padded to
  // a multiple of tp): the padding is left out of the orthogonalisation. Empty: none padded.
  std::vector<std::vector<int64_t>> whole_shape;
  parallel::Communicator* owners = nullptr;
};

// What every Muon keeps, however its weights are stored: each weight's owner and momentum, and
// the update rule. Weights are given by this rank's shapes of them (their tp parts).
class MuonCore {
 public:
  MuonCore(std::vector<std::vector<int64_t>> shapes, std::vector<MatrixSplit> splits, MuonOptions options,
           MuonSharding sharding, torch::Device device);
  size_t size() const { return shapes_.size(); }
  const MuonOptions& options() const { return options_; }
  const MuonSharding& sharding() const { return sharding_; }
  bool owns(size_t i) const;
  int64_t owner(size_t i) const { return owner_[i]; }
  // G: this rank's part of owned weight I's gradient. Advances the momentum and returns this
  // rank's part of the update X scaled by 0.2 sqrt(max(m, n)) (the caller applies -lr and decay).
  torch::Tensor update(size_t i, const torch::Tensor& g);

  // Checkpoints: the owners broadcast the momenta (collective over OWNERS), then every rank answers.
  void gather_moments();
  void release_moments() { gathered_.clear(); }
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) const;
  void set_moments(size_t i, const torch::Tensor& momentum);
  int64_t state_bytes() const;

 private:
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<MatrixSplit> splits_;
  MuonOptions options_;
  MuonSharding sharding_;
  torch::TensorOptions state_;  // fp32 on the weights' device
  std::vector<int64_t> owner_;
  std::vector<torch::Tensor> momentum_, gathered_;  // momentum_: owned weights only
};

// What every Muon optimizer answers the same way, whatever its weights' storage: steps taken,
// and the momenta for checkpoints (the momentum as the first moment; Muon has no second: zeros,
// so checkpoints keep the form AdamW gives them).
class MuonOptimizer : public Optimizer {
 public:
  explicit MuonOptimizer(MuonCore core) : core_(std::move(core)) {}
  int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(int64_t steps) override { steps_ = steps; }
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) override { return core_.moments(i); }
  void set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& /*exp_avg_sq*/) override {
    core_.set_moments(i, exp_avg);
  }
  void gather_moments() override { core_.gather_moments(); }
  void release_moments() override { core_.release_moments(); }
  int64_t state_bytes() const override { return core_.state_bytes(); }

 protected:
  MuonCore core_;
  int64_t steps_ = 0;
};

// Muon over weights each rank holds as tensors (tp parts; whole under ZeRO 0 and 1). Under
// ZeRO-1 the owner updates a weight and broadcasts it over OWNERS.
class Muon : public MuonOptimizer {
 public:
  Muon(std::vector<torch::Tensor> params, std::vector<MatrixSplit> splits, MuonOptions options,
       MuonSharding sharding = {});
  void step(double lr) override;
  void zero_grad() override;

 private:
  std::vector<torch::Tensor> params_;
};

}  // namespace loom::optim
