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
    {PipelineSchedule::zb_h1, 2, 4, 1},        {PipelineSchedule::zb_h1, 4, 8, 1},
    {PipelineSchedule::zb_h1, 4, 4, 1},        {PipelineSchedule::zb_h1, 8, 16, 1},
};

}  // namespace

TEST_CASE("every pass runs once and every backward follows its forward", "[pipeline]") {
  for (auto [schedule, p, m, v] : kLayouts) {
    for (int64_t s = 0; s < p; ++s) {
      INFO("schedule " << static_cast<int>(schedule) << " p " << p << " m " << m << " v " << v << " stage " << s);
      auto actions = pipeline_actions(schedule, s, p, m, v);
      const bool split = splits_backward(schedule);
      CHECK(static_cast<int64_t>(actions.size()) == (split ? 3 : 2) * m * v);
      std::map<std::pair<int64_t, int64_t>, int> forwards, backwards, weights;
      for (const auto& a : actions) {
        CHECK((a.kind == A::backward) == (a.kind != A::forward && !split));
        if (a.kind == A::forward) {
          CHECK(++forwards[{a.micro, a.chunk}] == 1);
        } else if (a.kind == A::backward_weight) {
          CHECK(backwards.count({a.micro, a.chunk}) == 1);  // W after its B
          CHECK(++weights[{a.micro, a.chunk}] == 1);
        } else {
          CHECK(forwards.count({a.micro, a.chunk}) == 1);
          CHECK(++backwards[{a.micro, a.chunk}] == 1);
        }
      }
      CHECK(static_cast<int64_t>(backwards.size()) == m * v);
      CHECK(static_cast<int64_t>(weights.size()) == (split ? m * v : 0));
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
    // A split backward's step is 3m units of F = B = W with p - 1 of them idle (zb-h1, m >= p).
    const double expected =
        static_cast<double>(p - 1) / static_cast<double>((splits_backward(schedule) ? 3 * m : m * v) + p - 1);
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
  CHECK(timeline.find("bubble 33.3% of the step (formula (p-1)/(m*v+p-1) = 33.3%)") != std::string::npos);
  CHECK(timeline.find("legend: Fn forward of micro-batch n, Bn == its backward") != std::string::npos);
  CHECK(timeline.find("lowercase") == std::string::npos);
  // Interleaved: a stage's second chunk is lowercase, and the legend says so.
  const std::string interleaved = render_pipeline_timeline(PipelineSchedule::interleaved, 2, 4, 2);
  INFO(interleaved);
  CHECK(interleaved.find("f0") != std::string::npos);
  CHECK(interleaved.find("lowercase (fn, bn) is a stage's odd model chunks") != std::string::npos);
}

TEST_CASE("zb-h1 is 1F1B with B and W, stage s holding back s W passes (pp=2, m=4 by hand)", "[pipeline]") {
  const auto f = A::forward, b = A::backward_input, w = A::backward_weight;
  const std::vector<A> stage0 = {{f, 0, 0}, {f, 1, 0}, {b, 0, 0}, {w, 0, 0}, {f, 2, 0}, {b, 1, 0},
                                 {w, 1, 0}, {f, 3, 0}, {b, 2, 0}, {w, 2, 0}, {b, 3, 0}, {w, 3, 0}};
  const std::vector<A> stage1 = {{f, 0, 0}, {b, 0, 0}, {f, 1, 0}, {b, 1, 0}, {w, 0, 0}, {f, 2, 0},
                                 {b, 2, 0}, {w, 1, 0}, {f, 3, 0}, {b, 3, 0}, {w, 2, 0}, {w, 3, 0}};
  CHECK(pipeline_actions(PipelineSchedule::zb_h1, 0, 2, 4, 1) == stage0);
  CHECK(pipeline_actions(PipelineSchedule::zb_h1, 1, 2, 4, 1) == stage1);
}

TEST_CASE("zb-h1 at pp 4, m 8 (F = B = W): at most 40% of 1F1B's bubble, the same peak in flight", "[pipeline]") {
  const auto one_f_one_b = simulate_pipeline(PipelineSchedule::one_f_one_b, 4, 8, 1);
  const auto zb = simulate_pipeline(PipelineSchedule::zb_h1, 4, 8, 1);
  // Idle time per stage in forward-times: 1F1B (p-1)(F+B+W) = 9, ZB-H1 (p-1)(F+B-W) = 3.
  CHECK(one_f_one_b.idle == Approx(9.0));
  CHECK(zb.idle == Approx(3.0));
  CHECK(zb.idle <= 0.4 * one_f_one_b.idle);
  // As a share of the step (24 units of compute either way): 9/33 and 3/27.
  CHECK(one_f_one_b.bubble == Approx(9.0 / 33.0));
  CHECK(zb.bubble == Approx(3.0 / 27.0));
  CHECK(zb.bubble == Approx(formula_bubble(PipelineSchedule::zb_h1, 4, 8, 1)));
  CHECK(zb.peak_in_flight == one_f_one_b.peak_in_flight);
  CHECK(zb.peak_in_flight == std::vector<int64_t>{4, 3, 2, 1});
  // Micro-batches whose weight gradients wait: at most the first stage's 1F1B peak on every stage.
  CHECK(zb.peak_awaiting_weights == std::vector<int64_t>{4, 4, 4, 4});
  for (int64_t p : {2, 4, 8}) {
    for (int64_t m : {p, 2 * p, 4 * p}) {
      INFO("p " << p << " m " << m);
      const auto sim = simulate_pipeline(PipelineSchedule::zb_h1, p, m, 1);
      CHECK(sim.idle == Approx(static_cast<double>(p - 1)));
      CHECK(sim.idle <= simulate_pipeline(PipelineSchedule::one_f_one_b, p, m, 1).idle / 3.0 + 1e-9);
    }
  }
  const std::string timeline = render_pipeline_timeline(PipelineSchedule::zb_h1, 4, 8, 1);
  INFO(timeline);
  CHECK(timeline.find("stage 3 |.  .  .  F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 ") != std::string::npos);
  CHECK(timeline.find("bubble 11.1% of the step (formula (p-1)/(3m+p-1) = 11.1%)") != std::string::npos);
  CHECK(timeline.find("idle per stage 3.00 forward-times, 12.5% of the compute (formula (p-1)/(3m) = 12.5%)") !=
        std::string::npos);
  CHECK(timeline.find("peak micro-batches in flight per stage (forward run, input gradient not): 4 3 2 1") !=
        std::string::npos);
}
