#include "optim/partitioned_optimizer.h"

namespace loom::optim {

PartitionedOptimizer::PartitionedOptimizer(std::vector<std::unique_ptr<Optimizer>> parts,
                                           const std::vector<size_t>& part_of)
    : parts_(std::move(parts)) {
  std::vector<size_t> next(parts_.size(), 0);
  for (size_t part : part_of) {
    TORCH_CHECK(part < parts_.size(), "PartitionedOptimizer: part ", part, " of ", parts_.size());
    where_.emplace_back(part, next[part]++);
  }
}

PartitionedOptimizer::PartitionedOptimizer(std::vector<std::unique_ptr<Optimizer>> parts,
                                           std::vector<std::pair<size_t, size_t>> where)
    : parts_(std::move(parts)), where_(std::move(where)) {
  for (const auto& [part, index] : where_)
    TORCH_CHECK(part < parts_.size(), "PartitionedOptimizer: part ", part, " of ", parts_.size());
}

// In order: a later part may overwrite what an earlier one all-gathered (ZeRO-1's AdamW, then Muon).
void PartitionedOptimizer::step(double lr) {
  for (auto& p : parts_) p->step(lr);
}

void PartitionedOptimizer::zero_grad() {
  for (auto& p : parts_) p->zero_grad();
}

int64_t PartitionedOptimizer::steps_taken() const {
  return parts_.front()->steps_taken();
}

void PartitionedOptimizer::set_steps_taken(int64_t steps) {
  for (auto& p : parts_) p->set_steps_taken(steps);
}

void PartitionedOptimizer::gather_moments() {
  for (auto& p : parts_) p->gather_moments();
}

void PartitionedOptimizer::release_moments() {
  for (auto& p : parts_) p->release_moments();
}

std::pair<torch::Tensor, torch::Tensor> PartitionedOptimizer::moments(size_t i) {
  const auto [part, index] = where_.at(i);
  return parts_[part]->moments(index);
}

void PartitionedOptimizer::set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  const auto [part, index] = where_.at(i);
  parts_[part]->set_moments(index, exp_avg, exp_avg_sq);
}

int64_t PartitionedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : parts_) bytes += p->state_bytes();
  return bytes;
}

}  // namespace loom::optim
