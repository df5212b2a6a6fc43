// Several optimizers over disjoint parts of one parameter list, seen as one:
// MoE experts are sharded (ZeRO) and reduced over expert-dp while the rest of
// the model uses dp, so each part has its own optimizer, and checkpoints
// still address parameters by their index in the whole list.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

class PartitionedOptimizer : public Optimizer {
 public:
  // PART_OF[i]: which of PARTS owns parameter I of the whole list; its index in
  // that part is its position among the part's parameters, in list order.
  PartitionedOptimizer(std::vector<std::unique_ptr<Optimizer>> parts, const std::vector<size_t>& part_of);
  // WHERE[i]: the part that owns parameter I and its index there (a part may hold parameters
  // that another part updates: ZeRO-1's AdamW keeps its buckets whole and leaves Muon's weights).
  PartitionedOptimizer(std::vector<std::unique_ptr<Optimizer>> parts, std::vector<std::pair<size_t, size_t>> where);
  void step(double lr) override;
  void zero_grad() override;
  int64_t steps_taken() const override;
  void set_steps_taken(int64_t steps) override;
  void gather_moments() override;
  void release_moments() override;
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) override;
  void set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) override;
  int64_t state_bytes() const override;

 private:
  std::vector<std::unique_ptr<Optimizer>> parts_;
  std::vector<std::pair<size_t, size_t>> where_;  // (part, index in part) of each parameter
};

}  // namespace loom::optim
