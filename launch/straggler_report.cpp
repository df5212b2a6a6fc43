#include "launch/straggler_report.h"

#include <algorithm>
#include <vector>

#include "core/logging.h"

namespace loom::launch {

void StragglerMonitor::add_step(double step_s, double blocked_total_s) {
  const double blocked = last_blocked_s_ < 0 ? 0.0 : blocked_total_s - last_blocked_s_;
  // The first step's blocked time includes the wait for every rank to arrive, so it counts from then on.
  if (last_blocked_s_ >= 0) {
    compute_s_ += std::max(0.0, step_s - blocked);
    ++steps_;
  }
  last_blocked_s_ = blocked_total_s;
}

nlohmann::json StragglerMonitor::report(parallel::Communicator& world) {
  auto mine = torch::full({1}, steps_ > 0 ? compute_s_ / static_cast<double>(steps_) : 0.0, torch::kFloat64);
  auto all = torch::empty({world.size()}, torch::kFloat64);
  world.all_gather(all, mine).wait();
  compute_s_ = 0.0;
  steps_ = 0;
  const auto* times = all.data_ptr<double>();
  std::vector<double> sorted(times, times + world.size());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  const auto slowest = std::max_element(times, times + world.size()) - times;
  const double worst = times[slowest];

  if (world.size() > 1 && median > 0 && worst > threshold_ * median) {
    suspect_reports_ = slowest == suspect_ ? suspect_reports_ + 1 : 1;
    suspect_ = slowest;
  } else {
    suspect_ = -1;
    suspect_reports_ = 0;
  }
  if (suspect_reports_ == persistence_) {  // once per streak
    warn0(
        "straggler: rank {} computed {:.1f} ms per step against a median of {:.1f} ms, over {:.0f}% above it for {} "
        "log intervals in a row; every other rank waits for it (check its host: a throttled or failing device, "
        "another job on its cores, a slow disk)",
        slowest, worst * 1e3, median * 1e3, (threshold_ - 1.0) * 100.0, persistence_);
  }
  return {{"min_ms", sorted.front() * 1e3},
          {"median_ms", median * 1e3},
          {"max_ms", worst * 1e3},
          {"slowest_rank", slowest}};
}

}  // namespace loom::launch
