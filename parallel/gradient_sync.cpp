#include "parallel/gradient_sync.h"

#include "optim/partitioned_optimizer.h"

namespace loom::parallel {

std::unique_ptr<GradientSync> make_gradient_sync(ProcessGroups& groups, const GradientSyncOptions& options) {
  if (options.zero_stage >= 2 && groups.dp_cp().size() > 1) return make_unit_sharded_sync(groups, options);
  return make_bucketed_sync(groups, options);
}

std::unique_ptr<optim::Optimizer> GradientSync::join_parts(std::unique_ptr<optim::Optimizer> dense,
                                                           std::unique_ptr<optim::Optimizer> experts) const {
  if (!experts) return dense;
  std::vector<size_t> part_of;
  for (const auto& param : params_) part_of.push_back(param.expert ? 1 : 0);
  std::vector<std::unique_ptr<optim::Optimizer>> both;
  both.push_back(std::move(dense));
  both.push_back(std::move(experts));
  return std::make_unique<optim::PartitionedOptimizer>(std::move(both), part_of);
}

}  // namespace loom::parallel
