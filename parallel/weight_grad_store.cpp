#include "parallel/weight_grad_store.h"

namespace loom::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The scope in force on this thread, like torch's grad mode: the layers are
// deep inside a model whose forward signature cannot carry it.
thread_local WeightGradStore* current_store = nullptr;
thread_local WeightGradStore::Key current_key{0, 0};

struct LinearDeferringWeightGrad : torch::autograd::Function<LinearDeferringWeightGrad> {
  // The store travels as an integer: saved_data holds IValues only.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
                               int64_t store, int64_t micro, int64_t chunk) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["store"] = store;
    ctx->saved_data["micro"] = micro;
    ctx->saved_data["chunk"] = chunk;
    return torch::linear(input, weight);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& input = saved[0];
    const auto& weight = saved[1];  // as the layer used it, with its path back to the parameter
    const auto& grad = grads[0];
    torch::Tensor grad_input;
    if (ctx->needs_input_grad(0)) grad_input = grad.matmul(weight);
    if (ctx->needs_input_grad(1)) {
      auto* store = reinterpret_cast<WeightGradStore*>(ctx->saved_data["store"].toInt());
      store->defer({ctx->saved_data["micro"].toInt(), ctx->saved_data["chunk"].toInt()}, input.detach(), grad, weight);
    }
    return {grad_input, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void WeightGradStore::defer(Key key, torch::Tensor input, torch::Tensor output_grad, torch::Tensor weight) {
  std::lock_guard<std::mutex> lock(mutex_);
  deferred_[key].push_back({std::move(input), std::move(output_grad), std::move(weight)});
}

int64_t WeightGradStore::run(Key key) {
  std::vector<Deferred> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = deferred_.find(key);
    if (it == deferred_.end()) return 0;
    work = std::move(it->second);
    deferred_.erase(it);
  }
  std::vector<torch::Tensor> weights, gradients;
  {
    torch::NoGradGuard no_grad;
    for (auto& d : work) {
      const int64_t out = d.weight.size(0), in = d.weight.size(1);
      gradients.push_back(d.output_grad.reshape({-1, out}).t().mm(d.input.reshape({-1, in})));
      weights.push_back(std::move(d.weight));
      d.input = d.output_grad = torch::Tensor();  // freed as soon as used
    }
  }
  // One backward for the whole pass: a parameter several deferred products reach (a shared
  // key-value weight's two slices) gets their sum in one accumulation, as in an ordinary backward.
  torch::autograd::backward(weights, gradients);
  return static_cast<int64_t>(weights.size());
}

bool WeightGradStore::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return deferred_.empty();
}

DeferWeightGradients::DeferWeightGradients(WeightGradStore& store, WeightGradStore::Key key)
    : previous_store_(current_store), previous_key_(current_key) {
  current_store = &store;
  current_key = key;
}

DeferWeightGradients::~DeferWeightGradients() {
  current_store = previous_store_;
  current_key = previous_key_;
}

WeightGradDeferral current_weight_grad_deferral() {
  return {current_store, current_key};
}

torch::Tensor linear_deferring_weight_grad(const torch::Tensor& input, const torch::Tensor& weight,
                                           const torch::Tensor& bias) {
  // Nothing to defer without a scope, outside autograd, or for a weight that takes no gradient.
  if (!current_store || !torch::GradMode::is_enabled() || !weight.requires_grad())
    return torch::linear(input, weight, bias);
  auto y = LinearDeferringWeightGrad::apply(input, weight, reinterpret_cast<int64_t>(current_store), current_key.first,
                                            current_key.second);
  return bias.defined() ? y + bias : y;
}

}  // namespace loom::parallel
