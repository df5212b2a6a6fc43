// Which rank holds the others back. Ranks meet at every collective, so their
// step wall times are all alike; what differs is how long each spent working
// rather than waiting. A rank's compute time for a step is its wall time less
// the time it was blocked in collectives (parallel/comm_stats.h): the slowest
// rank waits least and computes longest. Every log interval the ranks share
// their mean compute time per step since the last report; metrics.jsonl gets
// the min, median, max and the slowest rank, and a rank over THRESHOLD times
// the median for PERSISTENCE reports in a row is named in a warning (a
// throttled GPU, a noisy neighbour, a slow disk on one host).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "parallel/communicator.h"

namespace loom::launch {

class StragglerMonitor {
 public:
  explicit StragglerMonitor(double threshold = 1.2, int64_t persistence = 3)
      : threshold_(threshold), persistence_(persistence) {}

  // After every step: this rank's step wall time, and its blocked seconds over the run so far.
  void add_step(double step_s, double blocked_total_s);

  // Collective over WORLD. {"min_ms", "median_ms", "max_ms", "slowest_rank"} of the ranks' mean compute time per
  // step since the last report; rank 0 warns of a persistent straggler.
  nlohmann::json report(parallel::Communicator& world);

 private:
  double threshold_;
  int64_t persistence_;
  double compute_s_ = 0.0;  // since the last report
  int64_t steps_ = 0;
  double last_blocked_s_ = -1.0;  // -1: before the first step
  int64_t suspect_ = -1;          // the rank over the threshold in the last reports, and for how many
  int64_t suspect_reports_ = 0;
};

}  // namespace loom::launch
