#include "parallel/parallel_module.h"

#include <map>

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
  std::map<const c10::TensorImpl*, std::string> described;  // each described tensor, and where
  std::map<std::string, std::string> named;                 // each global name, and where
  // Everything downstream keys a parameter by its tensor and its global name: a tensor described twice
  // would be reduced, clipped and stepped twice per step, a name given twice saved as one tensor of
  // overlapping slices that no resume can read, and a frozen one still moved by weight decay.
  auto take = [&](const std::string& path, const torch::nn::Module& module) {
    const auto* parallel = dynamic_cast<const ParallelModule*>(&module);
    if (!parallel) return;
    for (const auto& spec : parallel->parallel_specs()) {
      const std::string where =
          "'" + spec.name + "' (in the module " + (path.empty() ? "root" : "'" + path + "'") + ")";
      const std::string& name = spec.name;
      if (name.empty() || name.front() == '.' || name.back() == '.' || name.find("..") != std::string::npos) {
        throw InputError("the model's parameter " + where + " has an empty global name, or one with an empty part " +
                         "(a layer's name option left empty?)");
      }
      if (const auto [first, fresh] = described.emplace(spec.tensor.unsafeGetTensorImpl(), where); !fresh) {
        throw InputError("the model's parameter " + where + " is " + first->second +
                         " again: one module used in two places, or one tensor registered twice. loom reduces, "
                         "clips and updates each description once, so a shared parameter would be stepped twice; "
                         "give each place a parameter of its own");
      }
      if (const auto [first, fresh] = named.emplace(spec.name, where); !fresh) {
        throw InputError("two parameters have the global name '" + spec.name + "': " + first->second + " and " + where +
                         ". Checkpoints and ZeRO know a parameter by that name: give each a name of its "
                         "own (a layer's name option, or register_parallel_parameter's spec)");
      }
      if (!spec.tensor.requires_grad()) {
        throw InputError("the model's parameter " + where +
                         " does not require a gradient: loom trains every "
                         "described parameter (weight decay would still move a frozen one); freezing is not "
                         "supported, so keep a constant as a buffer (buffers are not saved in checkpoints)");
      }
      all.push_back(spec);
    }
  };
  take("", root);  // (root need not be held by a shared_ptr, which named_modules(include_self) would ask)
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false))
    take(item.key(), *item.value());
  std::string missing;
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    if (described.count(item.value().unsafeGetTensorImpl()) != 0) continue;
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
