// Non-finite steps. A step whose loss or global gradient norm is inf or nan
// skips its update on every rank alike (the verdict comes from values every
// rank agreed on), as an fp16 overflow does, in every precision. A run that
// cannot get past them -- train.max_skipped_steps in a row -- stops with exit
// code 3 instead of training on, or saving, a state that cannot train.
//
// Under fp16 a gradient overflow with a finite loss is the dynamic loss
// scale's business (it halves and the step is retried on the next batch); it
// counts towards divergence only once the scale can go no lower.
#pragma once

#include <cstdint>
#include <string>

namespace loom::launch {

class DivergenceGuard {
 public:
  // DYNAMIC_FP16: fp16 with a dynamic loss scale, whose floor (train.min_loss_scale) a report may blame.
  explicit DivergenceGuard(int64_t max_skipped_steps, bool dynamic_fp16 = false)
      : max_skipped_(max_skipped_steps), dynamic_fp16_(dynamic_fp16) {}

  struct Verdict {
    bool skip = false;       // the update is not applied
    bool diverging = false;  // and it counts towards train.max_skipped_steps
  };
  // LOSS and GRAD_NORM of STEP as every rank sees them. SCALE_CAN_DROP: fp16's dynamic loss scale is above its floor.
  Verdict judge(int64_t step, double loss, double grad_norm, bool scale_can_drop);

  // Whether the present state came out of a step with a finite loss, and so may be saved.
  bool state_trusted() const { return streak_ == 0; }
  bool diverged() const { return streak_ >= max_skipped_; }
  int64_t streak() const { return streak_; }
  // Why the run stops, for the error once diverged(), or (ENDED) when its last step came within a
  // streak shorter than train.max_skipped_steps: a run must not end as a success on a state that
  // gave a non-finite loss, which it did not save.
  std::string report(bool ended = false) const;

 private:
  int64_t max_skipped_;
  bool dynamic_fp16_;
  int64_t streak_ = 0;     // diverging steps in a row
  int64_t first_bad_ = 0;  // the first step of the streak
  int64_t last_bad_ = 0;
  int64_t last_applied_ = -1;  // the last step whose update was applied (-1: none in this run)
  // The streak's last step had a finite loss and gradients overflowing at fp16's lowest scale.
  bool overflow_at_floor_ = false;
  double last_loss_ = 0.0;  // of the streak's last step
  double last_grad_norm_ = 0.0;
};

}  // namespace loom::launch
