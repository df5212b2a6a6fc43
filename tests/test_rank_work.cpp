#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "core/errors.h"
#include "parallel/rank_work.h"

using Catch::Matchers::Contains;
using loom::parallel::RankWork;
using namespace std::chrono_literals;

namespace {

// A group of one rank: the meetings are local, so what is tested is the waiting and the verdicts.
loom::parallel::SelfCommunicator one_rank() {
  return loom::parallel::SelfCommunicator("world", 0, std::make_shared<loom::parallel::CommStats>());
}

const loom::parallel::WaitBound kBound{std::chrono::milliseconds(2000), "checkpoint.timeout_s", "waits on files"};

}  // namespace

TEST_CASE("rank work runs on its own thread and says how it ended", "[rank_work]") {
  RankWork empty({});
  CHECK(empty.status() == RankWork::done);

  std::atomic<bool> release{false};
  RankWork slow([&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  CHECK(slow.wait_for(20ms) == RankWork::running);
  release = true;
  CHECK(slow.wait_for(5s) == RankWork::done);
  CHECK(slow.error().empty());

  RankWork failing([] { throw loom::InputError("checkpoint.dir: no permission"); });
  CHECK(failing.wait_for(5s) == RankWork::failed);
  CHECK(failing.error() == "checkpoint.dir: no permission");
  // Its code, as the ranks share it (an async save's per-step verdict), throws its kind again.
  CHECK(failing.code() >= RankWork::failed);
  CHECK_THROWS_AS(loom::parallel::throw_work_failure(failing.code(), "again"), loom::InputError);
  CHECK(slow.code() == RankWork::done);
}

TEST_CASE("waiting for every rank keeps the kind of a failure and bounds a live rank's work", "[rank_work]") {
  auto world = one_rank();
  RankWork written([] { std::this_thread::sleep_for(30ms); });
  loom::parallel::wait_for_every_rank(world, written, kBound, "writing checkpoint step_3", 5ms);
  CHECK(written.status() == RankWork::done);

  // The error's kind decides the exit code: a path the user gave (2) or the machine (75).
  RankWork refused([] { throw loom::InputError("cannot create 'ck/step_3': permission denied"); });
  CHECK_THROWS_MATCHES(
      loom::parallel::wait_for_every_rank(world, refused, kBound, "writing checkpoint step_3", 5ms), loom::InputError,
      Catch::Matchers::Message(
          "writing checkpoint step_3 failed on this rank: cannot create 'ck/step_3': permission denied"));
  RankWork full([] { throw loom::EnvironmentError("disk full"); });
  CHECK_THROWS_AS(loom::parallel::wait_for_every_rank(world, full, kBound, "writing", 5ms), loom::EnvironmentError);
  // A rename or removal that failed (std::filesystem), by its errno: the machine's or the path's.
  RankWork unmounted(
      [] { throw std::filesystem::filesystem_error("cannot remove", std::error_code(EIO, std::generic_category())); });
  CHECK_THROWS_AS(loom::parallel::wait_for_every_rank(world, unmounted, kBound, "publishing", 5ms),
                  loom::EnvironmentError);
  RankWork immutable([] {
    throw std::filesystem::filesystem_error("cannot remove", std::error_code(EPERM, std::generic_category()));
  });
  CHECK_THROWS_AS(loom::parallel::wait_for_every_rank(world, immutable, kBound, "publishing", 5ms), loom::InputError);
  RankWork odd([] { throw std::logic_error("odd"); });
  try {
    loom::parallel::wait_for_every_rank(world, odd, kBound, "writing", 5ms);
    FAIL("no error");
  } catch (const loom::InputError&) {
    FAIL("an error of the code's own became bad input");
  } catch (const loom::EnvironmentError&) {
    FAIL("an error of the code's own became the machine's");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Contains("writing failed on this rank: odd"));
  }

  // A hung disk: the wait ends past the bound, naming it, and leaves the thread behind (with what
  // it holds: the flag outlives this test).
  auto release = std::make_shared<std::atomic<bool>>(false);
  {
    RankWork hung([release] {
      while (!*release) std::this_thread::sleep_for(1ms);
    });
    const loom::parallel::WaitBound short_bound{100ms, "checkpoint.timeout_s", "waits on files"};
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(
        loom::parallel::wait_for_every_rank(world, hung, short_bound, "writing checkpoint step_3", 5ms),
        loom::EnvironmentError,
        Catch::Matchers::Message("writing checkpoint step_3: rank 0 had not finished after 0.1 s, checkpoint.timeout_s "
                                 "(it still answers: a slow or hung file system, not a dead rank)"));
    CHECK(std::chrono::steady_clock::now() - start < 2s);
  }  // destroyed while its work runs: no wait here
  *release = true;
}

namespace {

// Two ranks, of which this is 0, whose every all-reduce fails as one on a stopped peer does.
class StoppedPeer : public loom::parallel::Communicator {
 public:
  StoppedPeer()
      : Communicator("world", {0, 1}, 0, std::make_shared<loom::parallel::CommStats>(), std::chrono::seconds(1)) {}
  std::string backend() const override { return "test"; }

 protected:
  std::unique_ptr<loom::parallel::PendingOp> do_all_reduce(torch::Tensor&, loom::parallel::ReduceOp) override {
    throw std::runtime_error("Operation timed out!");
  }
  std::unique_ptr<loom::parallel::PendingOp> do_all_gather(torch::Tensor&, torch::Tensor&) override { return nullptr; }
  std::unique_ptr<loom::parallel::PendingOp> do_reduce_scatter(torch::Tensor&, torch::Tensor&,
                                                               loom::parallel::ReduceOp) override {
    return nullptr;
  }
  std::unique_ptr<loom::parallel::PendingOp> do_all_to_all(torch::Tensor&, torch::Tensor&, std::vector<int64_t>&,
                                                           std::vector<int64_t>&) override {
    return nullptr;
  }
  std::unique_ptr<loom::parallel::PendingOp> do_broadcast(torch::Tensor&, int) override { return nullptr; }
  std::unique_ptr<loom::parallel::PendingOp> do_send_recv(std::vector<loom::parallel::P2POp>&) override {
    return nullptr;
  }
  std::unique_ptr<loom::parallel::PendingOp> do_barrier() override { return nullptr; }
};

}  // namespace

TEST_CASE("a rank's own failed work is still said when a peer stops answering meanwhile", "[rank_work]") {
  StoppedPeer world;
  RankWork ok({});
  CHECK_THROWS_AS(loom::parallel::wait_for_every_rank(world, ok, kBound, "writing", 5ms), loom::CommError);
  RankWork full([] { throw loom::EnvironmentError("cannot write 'ck/rank_00000.bin': No space left on device"); });
  try {
    loom::parallel::wait_for_every_rank(world, full, kBound, "writing checkpoint step_4", 5ms);
    FAIL("no error");
  } catch (const loom::EnvironmentError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::StartsWith("writing checkpoint step_4 failed on this rank: cannot write "
                                                     "'ck/rank_00000.bin': No space left on device; then all_reduce"));
    CHECK_THAT(e.what(), Contains("Operation timed out!"));
  }
}
