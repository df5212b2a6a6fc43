// Split backward for the zero-bubble pipeline schedules: a linear layer's
// backward is two passes, B (the gradient of its input, which the previous
// pipeline stage waits for) and W (the gradient of its weight, which nothing
// waits for until the optimizer step). Under a DeferWeightGradients scope the
// linear layers built on linear_deferring_weight_grad() compute only the
// input's gradient in B and leave (input, output gradient, weight) in a
// WeightGradStore; the pipeline executor runs them later, in the W pass the
// schedule gives that micro-batch and model chunk.
//
// The W pass hands each weight gradient to autograd at the weight tensor the
// layer used (a cast or a slice of the parameter, or the parameter itself), so
// it reaches the parameter's .grad through the same nodes and the same
// gradient-accumulator hooks as an ordinary backward: data-parallel buckets,
// ZeRO units and master weights see the gradient arrive when its W pass runs.
// During B autograd carries an undefined gradient to those parameters, which
// the hooks ignore (parallel/grad_hooks.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace loom::parallel {

class WeightGradStore {
 public:
  // A micro-batch and the model chunk (virtual stage on this rank) its pass ran through.
  using Key = std::pair<int64_t, int64_t>;

  // Called from backward (possibly on autograd's device thread): the weight gradient
  // OUTPUT_GRAD^T INPUT of WEIGHT, to be computed in KEY's W pass.
  void defer(Key key, torch::Tensor input, torch::Tensor output_grad, torch::Tensor weight);
  // KEY's W pass: every weight gradient deferred under KEY, handed to autograd in one call.
  // Returns how many there were.
  int64_t run(Key key);
  bool empty() const;

 private:
  struct Deferred {
    torch::Tensor input, output_grad, weight;
  };
  mutable std::mutex mutex_;
  std::map<Key, std::vector<Deferred>> deferred_;
};

// While alive on this thread, the forwards of deferring linear layers record
// that their weight gradients go to STORE under KEY. Set by the pipeline
// executor around a split-backward schedule's forward and input backward of one
// micro-batch and chunk (the backward's scope covers recomputed forwards).
class DeferWeightGradients {
 public:
  DeferWeightGradients(WeightGradStore& store, WeightGradStore::Key key);
  ~DeferWeightGradients();
  DeferWeightGradients(const DeferWeightGradients&) = delete;
  DeferWeightGradients& operator=(const DeferWeightGradients&) = delete;

 private:
  WeightGradStore* previous_store_;
  WeightGradStore::Key previous_key_;
};

// The scope in force on this thread (store null: none), for code that re-runs a forward later
// on another thread (parallel/recompute.cpp) and re-opens the scope there.
struct WeightGradDeferral {
  WeightGradStore* store = nullptr;
  WeightGradStore::Key key{0, 0};
};
WeightGradDeferral current_weight_grad_deferral();

// INPUT [..., in] x WEIGHT [out, in]^T + BIAS (optional): torch::linear, whose
// weight gradient waits for the W pass when a DeferWeightGradients scope is
// active and autograd records the call; otherwise torch::linear itself.
torch::Tensor linear_deferring_weight_grad(const torch::Tensor& input, const torch::Tensor& weight,
                                           const torch::Tensor& bias = {});

}  // namespace loom::parallel
