// AdamW with its state sharded over the data-parallel group (ZeRO stages 1
// and 2, as Megatron-LM's distributed optimizer does it): each rank keeps the
// moments of its contiguous shard of every gradient bucket, updates only the
// parameters in that shard, and the shards are all-gathered back into the
// parameters, which live in flat buffers laid out like the buckets.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "optim/adamw.h"
#include "parallel/grad_buckets.h"

namespace loom::optim {

class ZeroAdamW : public Optimizer {
 public:
  // PARAMS as given to BUCKETS (which must shard: zero stage 1 or 2). LEFT_ALONE[i]: parameter I
  // is updated by another optimizer after this one's step (Muon): this one leaves its values as
  // they were on every rank (empty: none).
  ZeroAdamW(std::vector<torch::Tensor> params, parallel::GradientBuckets& buckets, parallel::Communicator& dp,
            AdamWOptions options, std::vector<bool> left_alone = {});
  void step(double lr) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(int64_t steps) override { steps_ = steps; }
  void gather_moments() override;
  void release_moments() override;
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) override;
  void set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) override;

  int64_t state_bytes() const override;

 private:
  struct Shard {
    torch::Tensor params;                         // the bucket's parameters, flat (padded like its gradients)
    torch::Tensor exp_avg, exp_avg_sq;            // this rank's shard only
    torch::Tensor full_exp_avg, full_exp_avg_sq;  // after gather_moments()
  };
  std::vector<std::pair<size_t, size_t>> where_;  // each parameter's bucket and place in it
  std::vector<torch::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<bool> left_alone_;
  parallel::GradientBuckets& buckets_;
  parallel::Communicator& dp_;
  AdamWOptions options_;
  std::vector<Shard> shards_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
