#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

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

}  // namespace loom::optim
