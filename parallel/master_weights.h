// fp32 master weights for mixed precision (train.precision bf16 or fp16).
// The model's parameters become bf16 (or fp16) copies that forward and
// backward use; everything after backward (gradient reduction, clipping, the
// optimizer, checkpoints) works on the fp32 masters. Each micro-batch's
// gradient of a model parameter is added into its master's fp32 .grad as soon
// as autograd has it (so accumulation over micro-batches is in fp32, as
// Megatron-LM's main_grad is), then dropped; the listener hears of it, which
// is how gradient buckets learn that a master's gradient is complete.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace loom::parallel {

class MasterWeights {
 public:
  // MODEL: the model's fp32 parameters, which become DTYPE copies of the masters.
  MasterWeights(std::vector<torch::Tensor> model, torch::ScalarType dtype);
  MasterWeights(const MasterWeights&) = delete;
  MasterWeights& operator=(const MasterWeights&) = delete;

  // fp32, outside autograd; their .grad is allocated (or placed by gradient buckets).
  const std::vector<torch::Tensor>& masters() const { return masters_; }
  const std::vector<torch::Tensor>& model() const { return model_; }
  // The master of MODEL_PARAM (one of model()), or an undefined tensor.
  torch::Tensor master_of(const torch::Tensor& model_param) const;
  // Called with parameter I's index after a micro-batch's gradient reached its master.
  void set_listener(std::function<void(size_t)> listener) { listener_ = std::move(listener); }
  // Rounds the masters into the model's parameters: after an update, a load or an init.
  void copy_to_model();
  int64_t model_bytes() const;
  int64_t master_bytes() const;

 private:
  void on_gradient(size_t i);

  std::vector<torch::Tensor> model_, masters_;
  std::function<void(size_t)> listener_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: parameters hold them weakly
};

}  // namespace loom::parallel
