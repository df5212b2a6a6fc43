// loom schedule: see a layout's pipeline bubble before running it. Replays
// every stage's action list with unit costs and prints the timeline.
#include <cstdio>
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
  if (parallel::splits_backward(p.schedule)) {
    // What the split buys on this layout: the same passes under 1F1B, whose backward is B and W together.
    const auto zb = parallel::simulate_pipeline(p.schedule, p.pp, m, 1);
    const auto base = parallel::simulate_pipeline(PipelineSchedule::one_f_one_b, p.pp, m, 1);
    const double compute = 3.0 * static_cast<double>(m);
    std::printf(
        "against 1f1b on this layout: idle per stage %.2f vs %.2f forward-times (%.2fx); bubble rate (idle / "
        "compute) %.1f%% vs %.1f%%; %.1f%% vs %.1f%% of the step; peak in flight the same: %s\n",
        zb.idle, base.idle, zb.idle / base.idle, 100.0 * zb.idle / compute, 100.0 * base.idle / compute,
        100.0 * zb.bubble, 100.0 * base.bubble, zb.peak_in_flight == base.peak_in_flight ? "yes" : "NO");
  }
  return 0;
}

}  // namespace loom::launch
