#include <catch2/catch.hpp>
#include <limits>

#include "launch/divergence_guard.h"

using loom::launch::DivergenceGuard;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("divergence guard: non-finite steps in a row stop the run; a finite one resets the count", "[divergence]") {
  DivergenceGuard guard(3);
  CHECK_FALSE(guard.judge(1, 2.0, 1.0, false).skip);
  auto v = guard.judge(2, kNaN, 1.0, false);
  CHECK((v.skip && v.diverging));
  CHECK_FALSE(guard.state_trusted());
  guard.judge(3, 2.0, kInf, false);
  CHECK(guard.streak() == 2);
  CHECK_FALSE(guard.judge(4, 2.0, 0.5, false).skip);  // recovered: the count starts again
  CHECK(guard.state_trusted());
  for (int64_t step = 5; step <= 7; ++step) guard.judge(step, kInf, kNaN, false);
  CHECK(guard.diverged());
  CHECK_THAT(guard.report(), Catch::Contains("steps 5 to 7") && Catch::Contains("3 in a row") &&
                                 Catch::Contains("no update was applied after step 4"));
  CHECK_THAT(guard.report(), !Catch::Contains("min_loss_scale"));  // the loss itself was not finite
}

TEST_CASE("divergence guard: an fp16 overflow is the loss scale's to handle until the scale can drop no more",
          "[divergence]") {
  DivergenceGuard guard(2);
  for (int64_t step = 1; step <= 10; ++step) {  // the dynamic scale halves each time: skipped, not diverging
    const auto v = guard.judge(step, 3.0, kInf, /*scale_can_drop=*/true);
    CHECK((v.skip && !v.diverging));
  }
  CHECK_FALSE(guard.diverged());
  CHECK(guard.state_trusted());
  guard.judge(11, 3.0, kInf, /*scale_can_drop=*/false);  // at its floor
  guard.judge(12, kNaN, kInf, /*scale_can_drop=*/true);  // a non-finite loss diverges whatever the scale
  CHECK(guard.diverged());
  // Steps 1-10 applied nothing either: the report does not say "from step 11 on".
  CHECK_THAT(guard.report(), Catch::Contains("steps 11 to 12") && Catch::Contains("no update was applied in this run"));
}

TEST_CASE("divergence guard: gradients overflowing at fp16's lowest scale name train.min_loss_scale", "[divergence]") {
  DivergenceGuard bf16(2);  // the same steps without fp16's dynamic scale: no loss scale to blame
  bf16.judge(1, 3.0, kInf, false);
  bf16.judge(2, 3.0, kInf, false);
  REQUIRE(bf16.diverged());
  CHECK_THAT(bf16.report(), !Catch::Contains("min_loss_scale"));
  DivergenceGuard guard(2, /*dynamic_fp16=*/true);
  guard.judge(1, 3.0, 1.0, false);
  guard.judge(2, 3.0, kInf, /*scale_can_drop=*/false);
  guard.judge(3, 3.0, kInf, /*scale_can_drop=*/false);
  REQUIRE(guard.diverged());
  CHECK_THAT(guard.report(), Catch::Contains("train.min_loss_scale") && Catch::Contains("after step 1"));
}
