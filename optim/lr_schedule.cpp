#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "core/config_inert.h"
#include "core/logging.h"

namespace loom::optim {

namespace {

// Where STEP is along a phase of LENGTH steps that starts at FIRST: 0 at its first step, 1 at its last and after.
double progress(int64_t step, int64_t first, int64_t length) {
  const int64_t span = std::max<int64_t>(1, length - 1);
  return std::clamp(static_cast<double>(step - first) / static_cast<double>(span), 0.0, 1.0);
}

}  // namespace

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  switch (style) {
    case LrDecayStyle::constant: return lr;
    case LrDecayStyle::linear: return lr - (lr - min_lr) * progress(step, warmup_steps, decay_steps);
    case LrDecayStyle::wsd: {
      const int64_t anneal_start = warmup_steps + decay_steps - wsd_decay_steps;
      if (step < anneal_start) return lr;
      if (wsd_decay_steps == 1) return min_lr;  // an anneal of one step ends where it starts
      return lr - (lr - min_lr) * progress(step, anneal_start, wsd_decay_steps);
    }
    case LrDecayStyle::cosine: break;
  }
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress(step, warmup_steps, decay_steps)));
}

LrSchedule schedule_of(const TrainConfig& t, int64_t steps) {
  const int64_t decay = t.lr_decay_steps > 0 ? t.lr_decay_steps : steps - t.warmup_steps;
  return LrSchedule{t.lr, t.min_lr, t.warmup_steps, decay, t.lr_decay_style, t.lr_wsd_decay_steps};
}

nlohmann::json lr_schedule_record(const TrainConfig& t) {
  return {{"lr", t.lr},
          {"min_lr", t.min_lr},
          {"warmup_steps", t.warmup_steps},
          {"lr_decay_style", to_string(t.lr_decay_style)},
          {"lr_decay_steps", t.lr_decay_steps},
          {"lr_wsd_decay_steps", t.lr_wsd_decay_steps},
          {"steps", t.steps}};
}

namespace {

// The train config whose schedule the checkpoint trained on: T with the keys SAVED recorded (its
// manifest's lr_schedule), or, from a checkpoint before that record, with its train.steps alone.
std::optional<TrainConfig> saved_schedule(const TrainConfig& t, const nlohmann::json& saved, int64_t saved_steps) {
  TrainConfig before = t;
  if (saved.is_object()) {
    try {
      before.lr = saved.at("lr").get<double>();
      before.min_lr = saved.at("min_lr").get<double>();
      before.warmup_steps = saved.at("warmup_steps").get<int64_t>();
      before.lr_decay_style = from_string<LrDecayStyle>(saved.at("lr_decay_style").get<std::string>());
      before.lr_decay_steps = saved.at("lr_decay_steps").get<int64_t>();
      before.lr_wsd_decay_steps = saved.at("lr_wsd_decay_steps").get<int64_t>();
      before.steps = saved.at("steps").get<int64_t>();
      return before;
    } catch (const std::exception&) {  // a record of another form: train.steps alone, if that
    }
  }
  if (saved_steps <= 0) return std::nullopt;
  before.steps = saved_steps;
  return before;
}

// train.steps alone changed: what that does to the schedule, which the user may not expect.
void report_steps_change(const TrainConfig& t, const TrainConfig& before, int64_t step) {
  if (t.lr_decay_steps > 0) {
    info0(
        "train.steps changed from {} (the checkpoint's) to {}; with train.lr_decay_steps = {} the learning-rate "
        "schedule does not depend on train.steps (lr at step {}: {:.4g})",
        before.steps, t.steps, t.lr_decay_steps, step + 1, schedule_of(t, t.steps).at(step));
    return;
  }
  // Two calls, not a chosen word: fmt checks a format string at compile time (a literal).
  const double was = schedule_of(before, before.steps).at(step), now = schedule_of(t, t.steps).at(step);
  if (t.steps > before.steps) {
    warn0(
        "train.steps changed from {} (the checkpoint's) to {}: the learning-rate decay stretches over the new "
        "length (lr at step {} was {:.4g} on the old schedule, is {:.4g} now); to extend the run without "
        "stretching it, set train.lr_decay_steps = {} (or train.lr_decay_style: constant or wsd)",
        before.steps, t.steps, step + 1, was, now, before.steps - t.warmup_steps);
  } else {
    warn0(
        "train.steps changed from {} (the checkpoint's) to {}: the learning-rate decay shrinks to the new length "
        "(lr at step {} was {:.4g} on the old schedule, is {:.4g} now); to keep the old schedule and stop "
        "early, set train.lr_decay_steps = {}, or keep train.steps and set train.exit_after",
        before.steps, t.steps, step + 1, was, now, before.steps - t.warmup_steps);
  }
}

}  // namespace

void report_schedule_change(const TrainConfig& t, const nlohmann::json& saved, int64_t saved_steps, int64_t step) {
  const auto before = saved_schedule(t, saved, saved_steps);
  if (!before) return;
  std::ostringstream changed;
  // Each value in full ({}: the shortest text that reads back the same), and only a key that acts.
  Config whole;  // (the rules of train.* keys read train.* alone)
  whole.train = t;
  const auto note = [&](const char* key, auto was, auto is) {
    if (was != is && !has_no_effect(whole, std::string("train.") + key))
      changed << (changed.tellp() > 0 ? ", " : "") << "train." << key << " " << fmt::format("{}", was) << " -> "
              << fmt::format("{}", is);
  };
  note("lr", before->lr, t.lr);
  note("min_lr", before->min_lr, t.min_lr);
  note("warmup_steps", before->warmup_steps, t.warmup_steps);
  note("lr_decay_style", to_string(before->lr_decay_style), to_string(t.lr_decay_style));
  note("lr_decay_steps", before->lr_decay_steps, t.lr_decay_steps);
  note("lr_wsd_decay_steps", before->lr_wsd_decay_steps, t.lr_wsd_decay_steps);
  if (changed.tellp() == 0) {
    if (before->steps != t.steps) report_steps_change(t, *before, step);
    return;
  }
  note("steps", before->steps, t.steps);  // one line for every change, the lr on both whole schedules
  warn0("the learning-rate schedule changed since the checkpoint ({}): the lr at step {} is {:.4g}, was {:.4g}",
        changed.str(), step + 1, schedule_of(t, t.steps).at(step), schedule_of(*before, before->steps).at(step));
}

}  // namespace loom::optim
