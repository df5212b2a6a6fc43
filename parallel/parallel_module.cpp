#include "parallel/parallel_module.h"

#include <set>

#include "core/errors.h"

namespace loom::parallel {

torch::Tensor ParallelModule::register_parallel_parameter(const std::string& name, torch::Tensor tensor,
                                                          ParallelParameter spec) {
  spec.tensor = register_parameter(name, std::move(tensor));
  specs_.push_back(spec);
  return spec.tensor;
}

std::vector<ParallelParameter> collect_parallel_parameters(const torch::nn::Module& root) {
  std::vector<ParallelParameter> all;
  std::set<const c10::TensorImpl*> described;
  auto take = [&](const torch::nn::Module& module) {
    const auto* parallel = dynamic_cast<const ParallelModule*>(&module);
    if (!parallel) return;
    for (const auto& spec : parallel->parallel_specs()) {
      all.push_back(spec);
      described.insert(spec.tensor.unsafeGetTensorImpl());
    }
  };
  take(root);  // (root need not be held by a shared_ptr, which modules(include_self) would ask)
  for (const auto& module : root.modules(/*include_self=*/false)) take(*module);
  std::string missing;
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    if (described.count(item.value().unsafeGetTensorImpl())) continue;
    missing += (missing.empty() ? "'" : ", '") + item.key() + "'";
  }
  if (!missing.empty()) {
    throw InputError("the model's parameter(s) " + missing +
                     " have no parallel description: create them with loom's parallel layers, or register them "
                     "with ParallelModule::register_parallel_parameter (parallel/parallel_module.h), so that "
                     "gradient reduction, ZeRO and checkpoints know how each is split");
  }
  return all;
}

}  // namespace loom::parallel
