// Learning rate per step (steps count from 0): linear warm-up to lr over warmup_steps, then
// Megatron-LM's decay styles over decay_steps steps, then min_lr:
//   cosine    min_lr + (lr - min_lr) (1 + cos(pi p)) / 2, p from 0 to 1 over the decay
//   linear    lr - (lr - min_lr) p
//   constant  lr throughout (min_lr unused)
//   wsd       lr until the decay's last wsd_decay_steps, then linear to min_lr
// The decay's last step is min_lr exactly (p = 1), as loom's cosine always was.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/config_enums.h"

namespace loom::optim {

struct LrSchedule {
  double lr;
  double min_lr;
  int64_t warmup_steps;
  int64_t decay_steps;  // after warm-up
  LrDecayStyle style = LrDecayStyle::cosine;
  int64_t wsd_decay_steps = 0;

  double at(int64_t step) const;
};

// The schedule of train config T were it STEPS long (lr_decay_steps 0: the decay fills the run).
LrSchedule schedule_of(const TrainConfig& t, int64_t steps);

// The learning-rate keys a checkpoint records (its manifest's lr_schedule: lr, min_lr, warmup_steps,
// lr_decay_style, lr_decay_steps, lr_wsd_decay_steps, steps).
nlohmann::json lr_schedule_record(const TrainConfig& t);

// A run resumed at STEP under T from a checkpoint that recorded SAVED (lr_schedule_record; not an
// object: not recorded, and then SAVED_STEPS, an older checkpoint's train.steps, 0: not that either):
// one line for what changed, as a config edited between a job's requeues changes the run without a
// word otherwise. train.steps alone: what it does to the decay (stretch, shrink, nothing under
// train.lr_decay_steps) and how to avoid it; any other key: each changed key, train.steps among
// them, and the lr of the next step on the old and the new schedule.
void report_schedule_change(const TrainConfig& t, const nlohmann::json& saved, int64_t saved_steps, int64_t step);

}  // namespace loom::optim
