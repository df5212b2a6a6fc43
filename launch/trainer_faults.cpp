// The Trainer's test faults (--inject-fault): where a rank dies, stalls, slows down, fails or
// overflows, on the first attempt only (launch/commands.h).
#include <chrono>
#include <csignal>
#include <limits>
#include <thread>

#include "core/errors.h"
#include "core/logging.h"
#include "launch/trainer.h"

namespace loom::launch {

std::function<void()> Trainer::save_fault(int64_t step) const {
  if (fault_.rank != groups_.rank() || fault_.step != step) return {};
  if (fault_.kind == "fail_save") {
    return [] { throw EnvironmentError("injected fault: writing this rank's checkpoint files failed"); };
  }
  if (fault_.kind != "kill_in_save") return {};
  return [] {
    log::warn("injected fault: killed halfway through saving a checkpoint");
    std::raise(SIGKILL);
  };
}

void Trainer::maybe_inject_fault(int64_t step) const {
  if (fault_.kind == "slow" && fault_.rank == groups_.rank() && step >= fault_.step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // outside any collective: compute time to the others
    return;
  }
  if (fault_.kind == "kill_in_save" || fault_.kind == "fail_save" || fault_.kind == "overflow" ||
      fault_.kind == "slow" || fault_.rank != groups_.rank() || fault_.step != step)
    return;
  log::warn("injected fault: {} at step {}", fault_.kind, step);
  if (fault_.kind == "kill") std::raise(SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

double Trainer::backward_loss_scale(int64_t step) const {
  if (fault_.kind == "overflow" && fault_.rank == groups_.rank() && fault_.step == step) {
    log::warn("injected fault: this rank's loss is multiplied by infinity at step {}", step);
    return std::numeric_limits<double>::infinity();
  }
  return scaler_ ? scaler_->scale() : 1.0;
}

}  // namespace loom::launch
