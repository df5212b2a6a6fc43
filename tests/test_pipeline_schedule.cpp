#include <catch2/catch.hpp>
#include <map>

#include "core/errors.h"
#include "parallel/pipeline_schedule.h"

using namespace loom::parallel;
using A = PipelineAction;

namespace {

const std::vector<std::tuple<PipelineSchedule, int64_t, int64_t, int64_t>> kLayouts = {
    {PipelineSchedule::gpipe, 2, 4, 1},        {PipelineSchedule::gpipe, 4, 8, 1},
    {PipelineSchedule::one_f_one_b, 2, 4, 1},  {PipelineSchedule::one_f_one_b, 4, 4, 1},
    {PipelineSchedule::one_f_one_b, 4, 16, 1}, {PipelineSchedule::one_f_one_b, 8, 3, 1},
    {PipelineSchedule::interleaved, 2, 4, 2},  {PipelineSchedule::interleaved, 4, 8, 2},
    {PipelineSchedule::interleaved, 4, 4, 3},  {PipelineSchedule::interleaved, 2, 6, 4},
};

}  // namespace

TEST_CASE("every pass runs once and every backward follows its forward", "[pipeline]") {
  for (auto [schedule, p, m, v] : kLayouts) {
    for (int64_t s = 0; s < p; ++s) {
      INFO("schedule " << static_cast<int>(schedule) << " p " << p << " m " << m << " v " << v << " stage " << s);
      auto actions = pipeline_actions(schedule, s, p, m, v);
      CHECK(static_cast<int64_t>(actions.size()) == 2 * m * v);
      std::map<std::pair<int64_t, int64_t>, int> forwards, backwards;
      for (const auto& a : actions) {
        if (a.kind == A::forward) {
          CHECK(++forwards[{a.micro, a.chunk}] == 1);
        } else {
          CHECK(forwards.count({a.micro, a.chunk}) == 1);
          CHECK(++backwards[{a.micro, a.chunk}] == 1);
        }
      }
      CHECK(static_cast<int64_t>(backwards.size()) == m * v);
    }
  }
}

TEST_CASE("1F1B keeps at most pp - stage micro-batches in flight", "[pipeline]") {
  for (int64_t p : {2, 4, 8}) {
    for (int64_t m : {1, 3, 8, 16}) {
      for (int64_t s = 0; s < p; ++s) {
        int64_t in_flight = 0, peak = 0;
        for (const auto& a : pipeline_actions(PipelineSchedule::one_f_one_b, s, p, m, 1)) {
          in_flight += a.kind == A::forward ? 1 : -1;
          peak = std::max(peak, in_flight);
        }
        CHECK(peak <= p - s);
        CHECK(peak == std::min(p - s, m));
      }
    }
  }
}

TEST_CASE("the interleaved order matches the table written by hand for pp=2, v=2, m=4", "[pipeline]") {
  const auto f = A::forward, b = A::backward;
  const std::vector<A> stage0 = {{f, 0, 0}, {f, 1, 0}, {f, 0, 1}, {f, 1, 1}, {f, 2, 0}, {b, 0, 1},
                                 {f, 3, 0}, {b, 1, 1}, {f, 2, 1}, {b, 0, 0}, {f, 3, 1}, {b, 1, 0},
                                 {b, 2, 1}, {b, 3, 1}, {b, 2, 0}, {b, 3, 0}};
  const std::vector<A> stage1 = {{f, 0, 0}, {f, 1, 0}, {f, 0, 1}, {b, 0, 1}, {f, 1, 1}, {b, 1, 1},
                                 {f, 2, 0}, {b, 0, 0}, {f, 3, 0}, {b, 1, 0}, {f, 2, 1}, {b, 2, 1},
                                 {f, 3, 1}, {b, 3, 1}, {b, 2, 0}, {b, 3, 0}};
  CHECK(pipeline_actions(PipelineSchedule::interleaved, 0, 2, 4, 2) == stage0);
  CHECK(pipeline_actions(PipelineSchedule::interleaved, 1, 2, 4, 2) == stage1);
}

TEST_CASE("the simulated bubble equals the formula for balanced stages", "[pipeline]") {
  for (auto [schedule, p, m, v] : kLayouts) {
    INFO("schedule " << static_cast<int>(schedule) << " p " << p << " m " << m << " v " << v);
    const double expected = static_cast<double>(p - 1) / static_cast<double>(m * v + p - 1);
    CHECK(simulate_pipeline(schedule, p, m, v).bubble == Approx(expected).epsilon(1e-9));
  }
}

TEST_CASE("unknown schedule names are refused naming the key", "[pipeline]") {
  CHECK(loom::from_string<PipelineSchedule>("1f1b") == PipelineSchedule::one_f_one_b);
  CHECK(loom::to_string(PipelineSchedule::one_f_one_b) == "1f1b");
  CHECK_THROWS_WITH(loom::from_string<PipelineSchedule>("zero-bubble"), Catch::Contains("parallel.schedule"));
}

TEST_CASE("every send has the matching receive on the neighbouring stage", "[pipeline]") {
  for (auto [schedule, p, m, v] : kLayouts) {
    INFO("schedule " << static_cast<int>(schedule) << " p " << p << " m " << m << " v " << v);
    // (from stage, to stage, gradient, micro, into) -> sends minus receives
    std::map<std::tuple<int64_t, int64_t, bool, int64_t, int64_t>, int> balance;
    int64_t messages = 0;
    for (int64_t s = 0; s < p; ++s) {
      for (const auto& a : pipeline_actions(schedule, s, p, m, v)) {
        for (const auto& t : pipeline_transfers(a, s, p, v)) {
          if (t.direction == PipelineTransfer::send) {
            ++messages;
            CHECK(t.into % p == t.peer);  // sent to the stage that holds the receiving virtual stage
            ++balance[{s, t.peer, t.gradient, t.micro, t.into}];
          } else {
            CHECK(t.into % p == s);
            --balance[{t.peer, s, t.gradient, t.micro, t.into}];
          }
        }
      }
    }
    for (const auto& [message, count] : balance) CHECK(count == 0);
    // Activations cross every boundary between virtual stages forward, gradients backward.
    CHECK(messages == 2 * m * (p * v - 1));
  }
}

TEST_CASE("the timeline shows each stage's passes and the bubble", "[pipeline]") {
  const std::string timeline = render_pipeline_timeline(PipelineSchedule::one_f_one_b, 2, 2, 1);
  INFO(timeline);
  // p=2, m=2 worked by hand: stage 1 starts one forward late and runs its
  // backward at once; stage 0 waits for each gradient to come back.
  CHECK(timeline.find("stage 0 |F0 F1 .  .  B0 == .  B1 == \n") != std::string::npos);
  CHECK(timeline.find("stage 1 |.  F0 B0 == F1 B1 == .  .  \n") != std::string::npos);
  CHECK(timeline.find("bubble 33.3% (formula (p-1)/(m*v+p-1) = 33.3%)") != std::string::npos);
}
