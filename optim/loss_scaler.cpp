#include "optim/loss_scaler.h"

#include <algorithm>

namespace loom::optim {

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.fixed > 0 ? options.fixed : options.initial) {}

bool LossScaler::update(bool overflow) {
  if (overflow) {
    ++skipped_;
    clean_ = 0;
    if (options_.fixed <= 0) scale_ = std::max(options_.min, scale_ / 2.0);
    return true;
  }
  if (options_.fixed <= 0 && ++clean_ >= options_.window) {
    scale_ *= 2.0;
    clean_ = 0;
  }
  return false;
}

void LossScaler::restore(double scale, int64_t clean_steps, int64_t skipped_steps) {
  scale_ = options_.fixed > 0 ? options_.fixed : scale;  // a fixed scale given now wins over the saved one
  clean_ = clean_steps;
  skipped_ = skipped_steps;
}

}  // namespace loom::optim
