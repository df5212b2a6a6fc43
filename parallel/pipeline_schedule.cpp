#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include "core/errors.h"

namespace loom::parallel {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  if (name == "interleaved") return PipelineSchedule::interleaved;
  throw InputError("config key 'parallel.schedule': '" + name + "' is not a schedule; use gpipe, 1f1b or interleaved");
}

namespace {

template <typename ForwardAt, typename BackwardAt>
std::vector<PipelineAction> one_f_one_b(int64_t warmup, int64_t total, const ForwardAt& forward_at,
                                        const BackwardAt& backward_at) {
  std::vector<PipelineAction> actions;
  warmup = std::min(warmup, total);
  for (int64_t k = 0; k < warmup; ++k) actions.push_back(forward_at(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    actions.push_back(forward_at(warmup + k));
    actions.push_back(backward_at(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) actions.push_back(backward_at(k));
  return actions;
}

}  // namespace

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                             int64_t micro_batches, int64_t chunks) {
  const int64_t p = stages, m = micro_batches, v = chunks;
  switch (schedule) {
    case PipelineSchedule::gpipe: {
      std::vector<PipelineAction> actions;
      for (int64_t i = 0; i < m; ++i) actions.push_back({PipelineAction::forward, i, 0});
      for (int64_t i = 0; i < m; ++i) actions.push_back({PipelineAction::backward, i, 0});
      return actions;
    }
    case PipelineSchedule::one_f_one_b:
      return one_f_one_b(
          p - stage - 1, m, [](int64_t k) { return PipelineAction{PipelineAction::forward, k, 0}; },
          [](int64_t k) { return PipelineAction{PipelineAction::backward, k, 0}; });
    case PipelineSchedule::interleaved: {
      // The k-th forward of a stage runs chunk (k / P) mod V on micro-batch
      // (k / (P V)) P + k mod P: P micro-batches go through one chunk, then the next.
      auto micro_of = [p, v](int64_t k) { return (k / (p * v)) * p + k % p; };
      return one_f_one_b(
          (p - stage - 1) * 2 + (v - 1) * p, m * v,
          [=](int64_t k) { return PipelineAction{PipelineAction::forward, micro_of(k), (k / p) % v}; },
          [=](int64_t k) { return PipelineAction{PipelineAction::backward, micro_of(k), v - 1 - (k / p) % v}; });
    }
  }
  return {};
}

PipelineSimulation simulate_pipeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches,
                                     int64_t chunks) {
  const int64_t p = stages, v = chunks, last = p * v - 1;
  const double forward_cost = 1.0 / static_cast<double>(v), backward_cost = 2.0 / static_cast<double>(v);
  std::vector<std::vector<PipelineAction>> lists;
  for (int64_t s = 0; s < p; ++s) lists.push_back(pipeline_actions(schedule, s, p, micro_batches, chunks));

  // finish[(kind, micro, virtual stage)]: when that pass ended.
  std::map<std::tuple<int, int64_t, int64_t>, double> finish;
  PipelineSimulation sim;
  sim.start.assign(static_cast<size_t>(p), {});
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0), busy(static_cast<size_t>(p), 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      while (next[s] < lists[s].size()) {
        const auto& a = lists[s][next[s]];
        const int64_t k = a.chunk * p + s;
        // A forward needs the previous virtual stage's forward; a backward the next one's backward.
        std::tuple<int, int64_t, int64_t> dependency =
            a.kind == PipelineAction::forward ? std::make_tuple(0, a.micro, k - 1)
                                              : (k == last ? std::make_tuple(0, a.micro, k)
                                                           : std::make_tuple(1, a.micro, k + 1));
        double ready = 0.0;
        if (!(a.kind == PipelineAction::forward && k == 0)) {
          auto it = finish.find(dependency);
          if (it == finish.end()) break;
          ready = it->second;
        }
        const double begin = std::max(ready, free_at[s]);
        const double cost = a.kind == PipelineAction::forward ? forward_cost : backward_cost;
        sim.start[s].push_back(begin);
        free_at[s] = begin + cost;
        busy[s] += cost;
        finish[{a.kind == PipelineAction::forward ? 0 : 1, a.micro, k}] = begin + cost;
        ++next[s];
        progress = true;
      }
    }
  }
  for (int64_t s = 0; s < p; ++s) {
    if (next[s] != lists[s].size()) throw std::logic_error("pipeline schedule deadlocks at stage " + std::to_string(s));
    sim.makespan = std::max(sim.makespan, free_at[s]);
  }
  for (int64_t s = 0; s < p; ++s) sim.bubble += (1.0 - busy[s] / sim.makespan) / static_cast<double>(p);
  return sim;
}

}  // namespace loom::parallel
