#include "launch/step_watchdog.h"

#include <fmt/format.h>

#include <algorithm>

#include "launch/exit_on_error.h"

namespace loom::launch {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

StepWatchdog::StepWatchdog(StepWatchdogOptions options, std::shared_ptr<const parallel::CollectivePresence> presence,
                           std::function<void(const std::string&)> expire)
    : options_(options), presence_(std::move(presence)), expire_(std::move(expire)) {
  if (!expire_) expire_ = [](const std::string& message) { end_process_now(1, message); };
  // A tenth of the shortest limit it can have, within [20 ms, 1 s]: it fires at most that late.
  const double shortest = options_.step_timeout_s > 0 ? options_.step_timeout_s : 2 * options_.collective_timeout_s;
  period_ = std::chrono::milliseconds(static_cast<int64_t>(std::clamp(shortest * 100.0, 20.0, 1000.0)));
  thread_ = std::thread([this] { watch(); });
}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StepWatchdog::start(int64_t step, const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  end_interval_locked(now);
  armed_ = true;
  step_ = step;
  interval_start_ = now;
  counted_s_ = 0.0;
  doing_.store(what);
}

void StepWatchdog::pause() {
  std::lock_guard<std::mutex> lock(mutex_);
  end_interval_locked(Clock::now());
  armed_ = false;
}

void StepWatchdog::end_interval_locked(Clock::time_point now) {
  if (armed_) slowest_s_ = std::max(slowest_s_, seconds(now - interval_start_));
}

double StepWatchdog::limit_s() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.step_timeout_s > 0) return options_.step_timeout_s;
  // T + 20 s at least: a collective's own timeout is followed by the heartbeats' check of which rank
  // stopped (seconds) before its report, which names the rank it waited on.
  const double t = options_.collective_timeout_s, floor = t + 20.0;
  if (slowest_s_ < 0) return std::max(3 * t, floor);
  return std::max({2 * t, floor, 10 * slowest_s_});
}

void StepWatchdog::watch() {
  const double period_s = seconds(period_);
  auto last = Clock::now();
  for (;;) {
    double limit = 0.0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait_for(lock, period_, [this] { return stopping_; });
      if (stopping_) return;
      const auto now = Clock::now();
      // A gap far past the period: the whole process was stopped (suspended) and continued, not stalled.
      const double gap = std::min(seconds(now - last), 2 * period_s);
      last = now;
      if (!armed_) continue;
      counted_s_ += gap;
    }
    limit = limit_s();
    // A rank waiting inside a collective gives the rank it waits on (stuck in its own work, whose
    // watchdog fires at the same limit) a moment to report first; the launcher then ends the rest.
    const bool in_collective = presence_ && presence_->inside.load() > 0;
    const double grace = in_collective ? 2.0 + 2 * period_s : 0.0;
    std::string message;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!armed_ || counted_s_ < limit + grace) continue;
      armed_ = false;
      message = message_locked(counted_s_, limit, in_collective);
    }
    expire_(message);
    return;
  }
}

std::string StepWatchdog::message_locked(double waited_s, double limit, bool in_collective) const {
  const bool automatic = options_.step_timeout_s <= 0;
  std::string rule;
  if (!automatic) {
    rule = fmt::format("train.step_timeout_s = {:g}", options_.step_timeout_s);
  } else if (slowest_s_ < 0) {
    rule = fmt::format("train.step_timeout_s automatic: before the first step ends, 3 x parallel.timeout_s = {:g} s",
                       limit);
  } else {
    rule = fmt::format(
        "train.step_timeout_s automatic: the largest of 2 x parallel.timeout_s, parallel.timeout_s + 20 s and 10 x "
        "the slowest step so far ({:.3g} s), {:g} s",
        slowest_s_, limit);
  }
  if (in_collective) {
    return fmt::format(
        "step {} made no progress for {:.1f} s ({}): this rank was {}, inside a collective: it waited that long on "
        "another rank, which neither answered nor reported a stall of its own first, and the collective did not "
        "time out; if a step of this job can take that long, raise train.step_timeout_s",
        step_, waited_s, rule, doing_.load());
  }
  return fmt::format(
      "step {} made no progress for {:.1f} s ({}): this rank was {}. A stall that holds every rank outside the "
      "collectives (a file system that stopped answering under the data, the run directory or checkpoint.dir; a "
      "GPU that hung; a model's own loop) ends the job here, where no collective's timeout would; if a step of "
      "this job can take that long, raise train.step_timeout_s (an explicit value holds from the first step, "
      "warm-up included)",
      step_, waited_s, rule, doing_.load());
}

}  // namespace loom::launch
