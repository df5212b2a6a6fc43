#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

namespace loom::parallel {

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

// ZB-H1 from 1F1B's list: each backward becomes B, and stage STAGE's W of
// micro-batch j follows its B of micro-batch j + STAGE; the last STAGE W passes
// close the list, in the cool-down where the B passes arrive with gaps.
std::vector<PipelineAction> split_backward(const std::vector<PipelineAction>& one_f_one_b_list, int64_t stage) {
  std::vector<PipelineAction> actions;
  int64_t inputs_done = 0, weights_done = 0;
  for (auto a : one_f_one_b_list) {
    if (a.kind != PipelineAction::backward) {
      actions.push_back(a);
      continue;
    }
    a.kind = PipelineAction::backward_input;
    actions.push_back(a);
    if (++inputs_done > stage) actions.push_back({PipelineAction::backward_weight, weights_done++, a.chunk});
  }
  while (weights_done < inputs_done) actions.push_back({PipelineAction::backward_weight, weights_done++, 0});
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
          p - stage - 1, m,
          [](int64_t k) {
            return PipelineAction{PipelineAction::forward, k, 0};
          },
          [](int64_t k) {
            return PipelineAction{PipelineAction::backward, k, 0};
          });
    case PipelineSchedule::zb_h1:
      return split_backward(pipeline_actions(PipelineSchedule::one_f_one_b, stage, stages, micro_batches, 1), stage);
    case PipelineSchedule::interleaved: {
      // The k-th forward of a stage runs chunk (k / P) mod V on micro-batch
      // (k / (P V)) P + k mod P: P micro-batches go through one chunk, then the next.
      auto micro_of = [p, v](int64_t k) { return (k / (p * v)) * p + k % p; };
      return one_f_one_b((p - stage - 1) * 2 + (v - 1) * p, m * v,
                         [=](int64_t k) {
                           return PipelineAction{PipelineAction::forward, micro_of(k), (k / p) % v};
                         },
                         [=](int64_t k) {
                           return PipelineAction{PipelineAction::backward, micro_of(k), v - 1 - (k / p) % v};
                         });
    }
  }
  return {};
}

std::vector<PipelineTransfer> pipeline_transfers(const PipelineAction& a, int64_t stage, int64_t stages,
                                                 int64_t chunks) {
  const int64_t k = a.chunk * stages + stage, last = stages * chunks - 1;
  auto stage_of = [stages](int64_t virtual_stage) { return virtual_stage % stages; };
  std::vector<PipelineTransfer> transfers;
  if (a.kind == PipelineAction::forward) {
    if (k > 0) transfers.push_back({PipelineTransfer::recv, false, a.micro, k, stage_of(k - 1)});
    if (k < last) transfers.push_back({PipelineTransfer::send, false, a.micro, k + 1, stage_of(k + 1)});
  } else if (a.kind != PipelineAction::backward_weight) {
    if (k < last) transfers.push_back({PipelineTransfer::recv, true, a.micro, k, stage_of(k + 1)});
    if (k > 0) transfers.push_back({PipelineTransfer::send, true, a.micro, k - 1, stage_of(k - 1)});
  }
  return transfers;
}

PipelineSimulation simulate_pipeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks) {
  const int64_t p = stages, v = chunks, last = p * v - 1;
  const double forward_cost = 1.0 / static_cast<double>(v);
  auto cost_of = [forward_cost](PipelineAction::Kind kind) {
    return kind == PipelineAction::backward ? 2 * forward_cost : forward_cost;
  };
  // Dependencies name a pass by (0 forward | 1 input gradient | 2 weight gradient, micro, virtual stage).
  auto pass_of = [](PipelineAction::Kind kind) {
    return kind == PipelineAction::forward ? 0 : kind == PipelineAction::backward_weight ? 2 : 1;
  };
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
        // A forward needs the previous virtual stage's forward; a backward (or B) the next one's
        // backward (or B); a W its own B.
        std::tuple<int, int64_t, int64_t> dependency =
            a.kind == PipelineAction::forward           ? std::make_tuple(0, a.micro, k - 1)
            : a.kind == PipelineAction::backward_weight ? std::make_tuple(1, a.micro, k)
            : k == last                                 ? std::make_tuple(0, a.micro, k)
                                                        : std::make_tuple(1, a.micro, k + 1);
        double ready = 0.0;
        if (!(a.kind == PipelineAction::forward && k == 0)) {
          auto it = finish.find(dependency);
          if (it == finish.end()) break;
          ready = it->second;
        }
        const double begin = std::max(ready, free_at[s]);
        const double cost = cost_of(a.kind);
        sim.start[s].push_back(begin);
        free_at[s] = begin + cost;
        busy[s] += cost;
        finish[{pass_of(a.kind), a.micro, k}] = begin + cost;
        ++next[s];
        progress = true;
      }
    }
  }
  for (int64_t s = 0; s < p; ++s) {
    if (next[s] != lists[s].size()) throw std::logic_error("pipeline schedule deadlocks at stage " + std::to_string(s));
    sim.makespan = std::max(sim.makespan, free_at[s]);
  }
  for (int64_t s = 0; s < p; ++s) {
    sim.bubble += (1.0 - busy[s] / sim.makespan) / static_cast<double>(p);
    // A chunk's forward is 1/V of the whole model's.
    sim.idle += (sim.makespan - busy[s]) / static_cast<double>(p);
    int64_t held = 0, awaiting = 0, peak_held = 0, peak_awaiting = 0;
    for (const auto& a : lists[s]) {
      if (a.kind == PipelineAction::forward) ++held, ++awaiting;
      if (a.kind == PipelineAction::backward || a.kind == PipelineAction::backward_input) --held;
      if (a.kind == PipelineAction::backward || a.kind == PipelineAction::backward_weight) --awaiting;
      peak_held = std::max(peak_held, held);
      peak_awaiting = std::max(peak_awaiting, awaiting);
    }
    sim.peak_in_flight.push_back(peak_held);
    sim.peak_awaiting_weights.push_back(peak_awaiting);
  }
  return sim;
}

double formula_bubble(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks) {
  const auto p = static_cast<double>(stages), m = static_cast<double>(micro_batches), v = static_cast<double>(chunks);
  return splits_backward(schedule) ? (p - 1) / (3 * m + p - 1) : (p - 1) / (m * v + p - 1);
}

std::string render_pipeline_timeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks) {
  const auto sim = simulate_pipeline(schedule, stages, micro_batches, chunks);
  // Columns of one chunk's forward: times are multiples of 1 / chunks.
  const auto column = [chunks](double t) { return static_cast<size_t>(t * static_cast<double>(chunks) + 0.5); };
  const size_t width = column(sim.makespan);
  const int cell = static_cast<int>(std::to_string(micro_batches - 1).size()) + 2;
  std::string out;
  for (int64_t s = 0; s < stages; ++s) {
    std::vector<std::string> cells(width, std::string(static_cast<size_t>(cell), ' '));
    for (auto& c : cells) c.replace(0, 1, ".");
    const auto actions = pipeline_actions(schedule, s, stages, micro_batches, chunks);
    for (size_t i = 0; i < actions.size(); ++i) {
      const auto& a = actions[i];
      char letter = letter_of(a.kind);
      if (a.chunk % 2 == 1) letter = static_cast<char>(letter - 'A' + 'a');
      std::string label = letter + std::to_string(a.micro);
      label.resize(static_cast<size_t>(cell), ' ');
      const size_t begin = column(sim.start[s][i]), span = a.kind == PipelineAction::backward ? 2 : 1;
      for (size_t c = begin; c < begin + span && c < width; ++c)
        cells[c] = c == begin ? label : std::string(static_cast<size_t>(cell), '=');
      if (span == 2 && begin + 1 < width) cells[begin + 1].back() = ' ';
    }
    out += "stage " + std::to_string(s) + " |";
    for (const auto& c : cells) out += c;
    out += "\n";
  }
  // What the letters mean, under the rows they label.
  out += splits_backward(schedule)
             ? "legend: Fn forward of micro-batch n, Bn its input gradient, Wn its weight gradient, . idle"
             : "legend: Fn forward of micro-batch n, Bn == its backward (two columns), . idle";
  if (chunks > 1)
    out += "; lowercase (fn, bn) is a stage's odd model chunks (1, 3, ...), uppercase its even ones (0, 2, ...)";
  out += "\n";
  // The formula's idle time per stage and step time, in forward times of the whole model
  // (F = B = W = 1): 1F1B and interleaved idle (p-1)(F+B+W)/v, ZB-H1 (p-1)(F+B-W).
  const auto p = static_cast<double>(stages), m = static_cast<double>(micro_batches), v = static_cast<double>(chunks);
  const bool split = splits_backward(schedule);
  const double formula_idle = split ? p - 1 : 3 * (p - 1) / v, compute = 3 * m;
  const char* formula = split ? "(p-1)/(3m+p-1)" : "(p-1)/(m*v+p-1)";
  const char* idle_formula = split ? "(p-1)/(3m)" : "(p-1)/(m*v)";
  char summary[512];
  std::snprintf(summary, sizeof(summary),
                "bubble %.1f%% of the step (formula %s = %.1f%%) with p=%lld stages, m=%lld micro-batches, v=%lld\n"
                "idle per stage %.2f forward-times, %.1f%% of the compute (formula %s = %.1f%%)\n",
                100.0 * sim.bubble, formula, 100.0 * formula_bubble(schedule, stages, micro_batches, chunks),
                static_cast<long long>(stages), static_cast<long long>(micro_batches), static_cast<long long>(chunks),
                sim.idle, 100.0 * sim.idle / compute, idle_formula, 100.0 * formula_idle / compute);
  std::string peaks = "peak micro-batches in flight per stage (forward run, input gradient not):";
  for (auto n : sim.peak_in_flight) peaks += " " + std::to_string(n);
  if (split) {
    peaks += "\npeak micro-batches awaiting weight gradients per stage (forward run, W not):";
    for (auto n : sim.peak_awaiting_weights) peaks += " " + std::to_string(n);
  }
  return out + summary + peaks + "\n";
}

int64_t passes_after_input_backward(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches) {
  int64_t count = 0;
  bool after_b = false;
  for (const auto& a : pipeline_actions(schedule, stage, stages, micro_batches, 1)) {
    if (a.kind == PipelineAction::backward_weight) continue;
    if (after_b) ++count;
    after_b = a.kind == PipelineAction::backward_input;
  }
  return count;
}

}  // namespace loom::parallel
