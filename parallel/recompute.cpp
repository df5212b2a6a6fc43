#include "parallel/recompute.h"

#include <ATen/CPUGeneratorImpl.h>

#include <optional>

#include "parallel/weight_grad_store.h"

namespace loom::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RngStates {
  torch::Tensor replicated, split;
  static RngStates capture(at::Generator* split_generator) {
    return {at::detail::getDefaultCPUGenerator().get_state(),
            split_generator ? split_generator->get_state() : torch::Tensor()};
  }
  void restore(at::Generator* split_generator) const {
    auto generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(replicated);
    if (split_generator) split_generator->set_state(split);
  }
};

struct Recompute : torch::autograd::Function<Recompute> {
  // The callable and generator travel as integers: saved_data holds IValues only.
  static torch::Tensor forward(AutogradContext* ctx, int64_t fn, int64_t generator, const torch::Tensor& a,
                               const torch::Tensor& b, const torch::Tensor& c) {
    auto* split = reinterpret_cast<at::Generator*>(generator);
    const auto states = RngStates::capture(split);
    ctx->saved_data["fn"] = fn;
    ctx->saved_data["generator"] = generator;
    // A split backward's scope, re-opened around the re-run: on a GPU autograd runs backward on
    // its device thread, where this thread's scope is not in force.
    const auto deferral = current_weight_grad_deferral();
    ctx->saved_data["deferral_store"] = reinterpret_cast<int64_t>(deferral.store);
    ctx->saved_data["deferral_micro"] = deferral.key.first;
    ctx->saved_data["deferral_chunk"] = deferral.key.second;
    ctx->saved_data["replicated_rng"] = states.replicated;
    if (states.split.defined()) ctx->saved_data["split_rng"] = states.split;
    ctx->save_for_backward({a, b, c});
    return (*reinterpret_cast<const RecomputedFn*>(fn))(a, b, c);  // autograd records nothing here
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* split = reinterpret_cast<at::Generator*>(ctx->saved_data["generator"].toInt());
    const auto& fn = *reinterpret_cast<const RecomputedFn*>(ctx->saved_data["fn"].toInt());
    auto saved = ctx->get_saved_variables();
    variable_list inputs;
    for (const auto& t : saved) {
      inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
    }
    const auto now = RngStates::capture(split);
    RngStates{ctx->saved_data["replicated_rng"].toTensor(),
              ctx->saved_data.count("split_rng") ? ctx->saved_data["split_rng"].toTensor() : torch::Tensor()}
        .restore(split);
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      std::optional<DeferWeightGradients> deferring;
      if (auto* store = reinterpret_cast<WeightGradStore*>(ctx->saved_data["deferral_store"].toInt())) {
        deferring.emplace(*store, WeightGradStore::Key{ctx->saved_data["deferral_micro"].toInt(),
                                                       ctx->saved_data["deferral_chunk"].toInt()});
      }
      output = fn(inputs[0], inputs[1], inputs[2]);
    }
    now.restore(split);
    torch::autograd::backward({output}, {grad_outputs[0]});
    variable_list grads{torch::Tensor(), torch::Tensor()};
    for (const auto& input : inputs) grads.push_back(input.requires_grad() ? input.grad() : torch::Tensor());
    return grads;
  }
};

}  // namespace

torch::Tensor recompute_in_backward(const RecomputedFn& fn, at::Generator* split_generator, const torch::Tensor& a,
                                    const torch::Tensor& b, const torch::Tensor& c) {
  // Autograd functions take no undefined tensors: unused slots get empty placeholders.
  auto defined = [](const torch::Tensor& t) { return t.defined() ? t : torch::empty({0}); };
  return Recompute::apply(reinterpret_cast<int64_t>(&fn), reinterpret_cast<int64_t>(split_generator), defined(a),
                          defined(b), defined(c));
}

}  // namespace loom::parallel
