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
    overflow_at_floor_ = loss_finite && dynamic_fp16_;  // a finite loss: the gradients overflowed at the floor
  } else if (!verdict.skip) {
    streak_ = 0;
    last_applied_ = step;
  }
  return verdict;
}

std::string DivergenceGuard::report(bool ended) const {
  // Steps an fp16 overflow skipped before the streak applied nothing either: name the last that did.
  const std::string applied = last_applied_ < 0 ? "no update was applied in this run"
                                                : fmt::format("no update was applied after step {}", last_applied_);
  const std::string floor =
      overflow_at_floor_ ? ": the gradients overflowed fp16 with the loss scale at its floor, train.min_loss_scale"
                         : "";
  return fmt::format(
      "the run {}: steps {} to {} had a non-finite loss or gradient norm ({} in a row, train.max_skipped_steps "
      "is {}; the last had loss {} and gradient norm {}{}); {}{}. Resume from an earlier checkpoint (--resume auto) "
      "with a lower train.lr or a tighter train.grad_clip",
      ended ? "ended diverging" : "diverged", first_bad_, last_bad_, streak_, max_skipped_, last_loss_, last_grad_norm_,
      floor, applied, ended ? ", and its last state, which could not train, was not saved" : "");
}

}  // namespace loom::launch
