#include "launch/parameter_slices.h"

#include <algorithm>

#include "core/errors.h"

namespace loom::launch {

SliceSpec slice_of(const parallel::ParallelParameter& p, int64_t tp_rank, int64_t tp_size) {
  if (p.tp_replicated()) return {};
  const auto global = p.global_shape_for(tp_size);
  const int64_t d = p.tp_split_dim, part = p.tensor.size(d), offset = tp_rank * part;
  return {d, offset, std::max<int64_t>(0, std::min(part, global[static_cast<size_t>(d)] - offset))};
}

void load_parameter_slices(const std::vector<parallel::ParallelParameter>& params,
                           const std::vector<torch::Tensor>& into, int64_t tp_rank, int64_t tp_size,
                           const GlobalSliceReader& read, const std::string& source) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    const auto spec = slice_of(p, tp_rank, tp_size);
    if (spec.dim >= 0 && spec.length == 0) continue;  // all padding
    auto slice = read(p.name, spec.dim, spec.offset, spec.length);
    if (!slice) throw InputError(source + " has no tensor '" + p.name + "'");
    auto target = spec.dim >= 0 ? into[i].narrow(spec.dim, 0, spec.length) : into[i];
    if (slice->sizes() != target.sizes()) {
      throw InputError(c10::str(source, ": tensor '", p.name, "' has shape ", slice->sizes(), " where ", target.sizes(),
                                " is needed (a different model size?)"));
    }
    target.copy_(*slice);
  }
}

}  // namespace loom::launch
