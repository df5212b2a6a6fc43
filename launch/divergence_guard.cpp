#include "launch/divergence_guard.h"

#include <cmath>

#include "core/logging.h"

namespace loom::launch {

DivergenceGuard::Verdict DivergenceGuard::judge(int64_t step, double loss, double grad_norm, bool scale_can_drop) {
  const bool loss_finite = std::isfinite(loss), grad_finite = std::isfinite(grad_norm);
  Verdict verdict;
  verdict.skip = !loss_finite || !grad_finite;
  verdict.diverging = !loss_finite || (!grad_finite && !scale_can_drop);
  if (verdict.diverging) {
    if (streak_ == 0) first_bad_ = step;
    ++streak_;
    last_bad_ = step;
    last_loss_ = loss;
    last_grad_norm_ = grad_norm;
  } else if (!verdict.skip) {
    streak_ = 0;
  }
  return verdict;
}

std::string DivergenceGuard::report() const {
  return fmt::format(
      "the run diverged: steps {} to {} had a non-finite loss or gradient norm ({} in a row, train.max_skipped_steps "
      "is {}; the last had loss {} and gradient norm {}); no update was applied from step {} on. Resume from an "
      "earlier checkpoint (--resume auto) with a lower train.lr or a tighter train.grad_clip",
      first_bad_, last_bad_, streak_, max_skipped_, last_loss_, last_grad_norm_, first_bad_);
}

}  // namespace loom::launch
