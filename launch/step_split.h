// Where a run's step time goes, measured on every rank, and the diagnosis ladder's verdict on it
// (`loom diagnose`, and the end of every run): compute, communication exposed on the critical path
// (the time a rank was blocked in a collective, per group and op: parallel/comm_stats.h), pipeline
// idle (blocked in a pipeline receive or send), data loading, the optimizer and checkpoint stalls.
// Compute is the rest of the step. The first step (warm-up) is left out when there are others.
//
// The ladder, on the mean step over the ranks: a rank whose own time (all but its waits) exceeds
// the median of the ranks of its pipeline stage by a quarter, and by a tenth of the step, is a
// straggler; else the largest of data (input-bound), checkpoint stalls (checkpoint-bound), pipeline
// idle (bubble-bound, beside the schedule's (p - 1) / (m + p - 1)), ZeRO-3's parameter gathers (memory-bound) and each
// group's exposed communication (communication-bound on it) when it takes a quarter of the step or more; else
// compute-bound.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/config.h"
#include "parallel/comm_stats.h"
#include "parallel/communicator.h"

namespace loom::launch {

class StepClock {
 public:
  enum class Part { data, optimizer, checkpoint };
  explicit StepClock(const parallel::CommStats& stats) : stats_(stats) {}

  void begin_step();
  void add(Part part, double seconds);
  // The step took STEP_S; COUNTED: it enters the run's means (not the warm-up step).
  void end_step(double step_s, bool counted);
  // The last step's split, in ms, for its metrics.jsonl row.
  nlohmann::json last_step_json() const;
  // Collective over WORLD: every rank's means per step; rank 0 returns the diagnosis (split per
  // rank, the means, the verdict), the others null. PP_STAGE: this rank's pipeline stage.
  nlohmann::json diagnose(parallel::Communicator& world, int64_t pp_stage, const Config& config) const;

 private:
  struct Split {
    double step = 0, data = 0, optimizer = 0, checkpoint = 0;
    std::map<std::pair<std::string, std::string>, double> exposed;  // (group, op) -> seconds
  };
  const parallel::CommStats& stats_;
  std::map<std::pair<std::string, std::string>, double> blocked_at_start_;
  Split current_, last_, total_;
  double pending_checkpoint_ = 0;
  int64_t steps_ = 0;
};

// The ladder's verdict and the table, from DIAGNOSIS (StepClock::diagnose's): the lines `loom
// diagnose` prints, the verdict last ("verdict: compute-bound ..."). A DIAGNOSIS without its keys
// throws nlohmann::json's out_of_range or type_error.
std::string format_diagnosis(const nlohmann::json& diagnosis);

}  // namespace loom::launch
