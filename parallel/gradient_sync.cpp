#include "parallel/gradient_sync.h"

namespace loom::parallel {

std::unique_ptr<GradientSync> make_gradient_sync(ProcessGroups& groups, const GradientSyncOptions& options) {
  if (options.zero_stage >= 2 && groups.dp_cp().size() > 1) return make_unit_sharded_sync(groups, options);
  return make_bucketed_sync(groups, options);
}

}  // namespace loom::parallel
