// parallel/later_steps.h without a network: the later steps of calls whose first step is done
// already (an empty handle), queued on the thread or run at the wait.
#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "parallel/later_steps.h"

using loom::parallel::CommHandle;
using loom::parallel::LaterSteps;

TEST_CASE("later steps: a thread of their own, or the caller's at the wait", "[comm]") {
  CHECK(LaterSteps::on_thread()->threaded());
  CHECK_FALSE(LaterSteps::when_waited()->threaded());

  // At the wait: nothing runs before it, and the call is never ready by itself.
  auto waited = LaterSteps::when_waited();
  bool ran = false;
  auto op = waited->after(CommHandle(), [&] { ran = true; });
  CHECK_FALSE(op->ready());
  CHECK_FALSE(ran);
  op->wait(std::chrono::milliseconds(1000));
  CHECK(ran);
}

TEST_CASE("later steps on a thread run in call order, and a failure fails the calls after it unissued", "[comm]") {
  auto later = LaterSteps::on_thread();
  std::vector<int> order;  // written by the thread only, read once every call is waited for
  std::vector<std::unique_ptr<loom::parallel::PendingOp>> ops;
  for (int call = 0; call < 5; ++call) {
    ops.push_back(later->after(CommHandle(), [&order, call] {
      order.push_back(call);
      if (call == 2) throw std::runtime_error("peer gone");
    }));
  }
  ops[0]->wait(std::chrono::milliseconds(0));
  ops[1]->wait(std::chrono::milliseconds(0));
  for (int call = 2; call < 5; ++call)
    CHECK_THROWS_WITH(ops[static_cast<size_t>(call)]->wait(std::chrono::milliseconds(0)), "peer gone");
  CHECK(order == std::vector<int>{0, 1, 2});  // 3 and 4 never issued
  CHECK(ops[4]->ready());

  // Told how long the caller's wait stood still, before and after the first step was done (here
  // done at launch, though the thread may reach it only after the wait began).
  auto timed = LaterSteps::on_thread();
  double on_first = -1, on_rest = -1;
  auto op = timed->after(
      CommHandle(), [] {}, [&](double first, double rest) { on_first = first, on_rest = rest; });
  op->wait(std::chrono::milliseconds(0));
  CHECK(on_first >= 0);
  CHECK(on_rest >= 0);
}

TEST_CASE("later steps still queued when the communicator closes fail instead of running", "[comm]") {
  std::atomic<bool> started{false}, release{false};
  std::atomic<int> ran{0};
  std::unique_ptr<loom::parallel::PendingOp> second;
  {
    auto later = LaterSteps::on_thread();
    auto first = later->after(CommHandle(), [&] {
      started = true;
      while (!release) std::this_thread::yield();
      ++ran;
    });
    second = later->after(CommHandle(), [&] { ++ran; });
    while (!started) std::this_thread::yield();  // the first is in progress (a call not yet begun would fail too)
    release = true;  // the destructor below lets the first finish and fails the second if still queued
  }
  // Either the thread reached the second before closing (ran 2), or the second failed unissued.
  if (ran == 1) CHECK_THROWS_WITH(second->wait(std::chrono::milliseconds(0)), Catch::Contains("closed"));
  if (ran == 2) CHECK_NOTHROW(second->wait(std::chrono::milliseconds(0)));
  CHECK(ran >= 1);
}
