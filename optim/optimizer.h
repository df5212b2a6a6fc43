// What the trainer and checkpoints need of an optimizer, so that a sharded
// one (ZeRO) and the plain one are interchangeable.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace loom::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate LR from the (reduced) gradients.
  virtual void step(double lr) = 0;
  virtual void zero_grad() = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t steps) = 0;
  // Collective for sharded optimizers: makes moments() answer for every parameter.
  virtual void gather_moments() {}
  // Drops what gather_moments() gathered (sharded optimizers hold whole moments only while saving).
  virtual void release_moments() {}
  // The first and second moments of parameter I, whole (as this rank's part of the parameter).
  virtual std::pair<torch::Tensor, torch::Tensor> moments(size_t i) = 0;
  // Sets them from whole tensors; a sharded optimizer keeps its part.
  virtual void set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) = 0;
  // Bytes of optimizer state this rank holds (for the memory report).
  virtual int64_t state_bytes() const = 0;
};

}  // namespace loom::optim
