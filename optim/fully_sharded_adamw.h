// AdamW over ZeRO-3's parameter shards (parallel/fully_sharded.h): each rank
// updates its shard of every unit with the moments of that shard; nothing is
// gathered after the step, since the next forward gathers what it uses.
#pragma once

#include <vector>

#include "optim/adamw.h"
#include "parallel/fully_sharded.h"

namespace loom::optim {

class FullyShardedAdamW : public Optimizer {
 public:
  // LEFT_ALONE[i]: SHARDED's parameter I is updated by another optimizer (Muon); empty: none.
  FullyShardedAdamW(parallel::FullyShardedParameters& sharded, parallel::Communicator& dp, AdamWOptions options,
                    std::vector<bool> left_alone = {});
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
  // Calls F(unit, parameter, begin, end) for each parameter's piece [begin, end) of the unit's
  // flat buffer that lies in this rank's shard.
  template <typename F>
  void for_each_piece(F f) const;

  parallel::FullyShardedParameters& sharded_;
  parallel::Communicator& dp_;
  AdamWOptions options_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;            // per unit, this rank's shard
  std::vector<torch::Tensor> full_exp_avg_, full_exp_avg_sq_;  // per unit, after gather_moments()
  std::vector<bool> decay_, left_alone_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
