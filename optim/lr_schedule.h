// Learning rate: linear warm-up to train.lr over warmup_steps, then cosine decay
// to train.min_lr at the last step. Steps count from 0.
#pragma once

#include <cstdint>

namespace loom::optim {

struct CosineSchedule {
  double lr;
  double min_lr;
  int64_t warmup_steps;
  int64_t total_steps;

  double at(int64_t step) const;
};

}  // namespace loom::optim
