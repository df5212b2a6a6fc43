// loom schedule: see a layout's pipeline bubble before running it. Replays
// every stage's action list with unit costs and prints the timeline.
#include <iostream>

#include "core/config.h"
#include "launch/commands.h"
#include "parallel/pipeline_schedule.h"

namespace loom::launch {

int schedule(const TopologyArgs& args) {
  Config config = load_config(args.config_path, args.overrides);
  const auto& p = config.parallel;
  const int64_t world = args.world > 0 ? args.world : p.tp * p.cp * p.pp * std::max<int64_t>(p.dp, 1);
  resolve_and_validate(config, world);
  const int64_t m = config.micro_batches_per_step();
  std::cout << to_string(p.schedule) << " schedule: pp=" << p.pp << ", virtual_stages=" << p.virtual_stages << ", " << m
            << " micro-batches per step (world " << world << ", dp " << p.dp << ")\n"
            << "unit costs: a chunk's forward is one column, its backward two"
            << (parallel::splits_backward(p.schedule) ? " (B and W, one each)" : "") << "; communication is free\n\n"
            << parallel::render_pipeline_timeline(p.schedule, p.pp, m, p.virtual_stages);
  return 0;
}

}  // namespace loom::launch
