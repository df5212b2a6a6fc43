// launch/step_watchdog.h: the limit it computes, and that it fires (with the step and what the rank
// was doing) only while an interval is watched. Its verdicts wait for a thread, never on a duration:
// a firing is awaited up to 30 s, and "did not fire" is checked after a pause it could not see.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "launch/step_watchdog.h"

using loom::launch::StepWatchdog;
using loom::launch::StepWatchdogOptions;

namespace {

struct Fired {
  std::mutex mutex;
  std::string message;
  std::atomic<int> count{0};
  std::function<void(const std::string&)> expire() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mutex);
      message = m;
      ++count;
    };
  }
  bool wait(std::chrono::seconds most = std::chrono::seconds(30)) {
    const auto end = std::chrono::steady_clock::now() + most;
    while (count.load() == 0 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return count.load() > 0;
  }
};

}  // namespace

TEST_CASE("step watchdog: the automatic limit", "[watchdog]") {
  Fired fired;
  StepWatchdog watchdog(StepWatchdogOptions{0.0, 300.0}, nullptr, fired.expire());
  CHECK(watchdog.limit_s() == Approx(900.0));  // before the first step ends: 3 x parallel.timeout_s
  watchdog.start(1, "beginning the step");
  watchdog.pause();
  CHECK(watchdog.limit_s() == Approx(600.0));  // a fast step: 2 x parallel.timeout_s
  StepWatchdog small(StepWatchdogOptions{0.0, 1.0}, nullptr, fired.expire());
  CHECK(small.limit_s() == Approx(21.0));  // parallel.timeout_s + 20 s: the collective's own report first
  small.start(1, "beginning the step");
  small.pause();
  CHECK(small.limit_s() == Approx(21.0));
  StepWatchdog fixed(StepWatchdogOptions{7.5, 300.0}, nullptr, fired.expire());
  CHECK(fixed.limit_s() == 7.5);
  CHECK(fired.count.load() == 0);
}

TEST_CASE("step watchdog: fires naming the step and what the rank was doing", "[watchdog]") {
  Fired fired;
  auto presence = std::make_shared<loom::parallel::CollectivePresence>();
  StepWatchdog watchdog(StepWatchdogOptions{0.2, 300.0}, presence, fired.expire());
  watchdog.start(12, "beginning the step");
  watchdog.doing("reading data");
  REQUIRE(fired.wait());
  std::lock_guard<std::mutex> lock(fired.mutex);
  CHECK_THAT(fired.message, Catch::Contains("step 12 made no progress for"));
  CHECK_THAT(fired.message, Catch::Contains("train.step_timeout_s = 0.2"));
  CHECK_THAT(fired.message, Catch::Contains("this rank was reading data."));
  CHECK(fired.count.load() == 1);  // once
}

TEST_CASE("step watchdog: says when the rank waits inside a collective", "[watchdog]") {
  Fired fired;
  auto presence = std::make_shared<loom::parallel::CollectivePresence>();
  presence->inside = 1;
  StepWatchdog watchdog(StepWatchdogOptions{0.2, 300.0}, presence, fired.expire());
  watchdog.start(3, "in the forward and backward passes");
  REQUIRE(fired.wait());
  std::lock_guard<std::mutex> lock(fired.mutex);
  CHECK_THAT(fired.message, Catch::Contains("inside a collective"));
}

TEST_CASE("step watchdog: a paused or restarted clock does not fire", "[watchdog]") {
  Fired fired;
  {
    StepWatchdog watchdog(StepWatchdogOptions{1.0, 300.0}, nullptr, fired.expire());
    watchdog.start(1, "beginning the step");
    watchdog.pause();  // a save: not watched however long
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    for (int i = 0; i < 30; ++i) {  // intervals each far below the limit, 1.5 s in all
      watchdog.start(2 + i, "beginning the step");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    watchdog.pause();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }  // (joined: nothing fires after this)
  CHECK(fired.count.load() == 0);
}
