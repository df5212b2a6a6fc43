// Loss scaling for fp16 (Micikevicius et al., "Mixed Precision Training"):
// the loss is multiplied by scale() before backward so that small fp16
// gradients do not flush to zero, and the fp32 master gradients are divided
// by it again. Dynamic scaling halves the scale when a step's gradients
// overflow (the step is skipped) and doubles it after WINDOW clean steps.
#pragma once

#include <cstdint>

namespace loom::optim {

struct LossScalerOptions {
  double fixed = 0.0;  // > 0: this scale always, never skipping for growth
  double initial = 65536.0;
  int64_t window = 1000;
  double min = 1.0;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});
  double scale() const { return scale_; }
  // After a step's gradients are reduced: OVERFLOW when any was inf or nan.
  // Returns whether the optimizer step must be skipped.
  bool update(bool overflow);
  int64_t skipped_steps() const { return skipped_; }
  int64_t clean_steps() const { return clean_; }
  // For checkpoints.
  void restore(double scale, int64_t clean_steps, int64_t skipped_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_ = 0;    // steps without an overflow since the last change of scale
  int64_t skipped_ = 0;  // over the run
};

}  // namespace loom::optim
