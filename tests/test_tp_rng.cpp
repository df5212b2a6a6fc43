#include <ATen/CPUGeneratorImpl.h>

#include <catch2/catch.hpp>
#include <map>
#include <tuple>

#include "parallel/tp_rng.h"

using loom::parallel::TensorParallelRng;

namespace {

// TensorParallelRng seeds the process's default generator: put it back for the tests that follow.
struct DefaultGeneratorGuard {
  torch::Tensor saved = at::detail::getDefaultCPUGenerator().get_state();
  ~DefaultGeneratorGuard() {
    auto generator = at::detail::getDefaultCPUGenerator();  // a handle: the const reference cannot set
    generator.set_state(saved);
  }
};

// A few draws, enough that two different streams cannot agree by chance.
std::vector<int64_t> draws(at::Generator* generator = nullptr) {
  auto t =
      generator ? torch::randint(1 << 30, {4}, *generator, torch::kInt64) : torch::randint(1 << 30, {4}, torch::kInt64);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + 4);
}

// The first draws of the replicated (default) and split streams of a rank at these coordinates.
struct Streams {
  std::vector<int64_t> replicated, split;
};
Streams streams_of(uint64_t seed, int64_t tp, int64_t dp, int64_t pp) {
  TensorParallelRng rng(seed, tp, dp, pp);
  return {draws(), draws(&rng.split())};
}

}  // namespace

TEST_CASE("tp rng: tp peers share the replicated stream and differ in the split one", "[tp_rng]") {
  DefaultGeneratorGuard guard;
  for (int64_t dp : {0, 1}) {
    for (int64_t pp : {0, 2}) {
      const auto rank0 = streams_of(1234, 0, dp, pp);
      for (int64_t tp = 1; tp < 4; ++tp) {
        const auto other = streams_of(1234, tp, dp, pp);
        CHECK(other.replicated == rank0.replicated);
        CHECK(other.split != rank0.split);
      }
    }
  }
}

TEST_CASE("tp rng: every stream of a job is distinct except the replicated one within a tp group", "[tp_rng]") {
  DefaultGeneratorGuard guard;
  // Data-parallel ranks and pipeline stages draw their own masks; no split stream may
  // coincide with another rank's split or replicated stream.
  std::map<std::vector<int64_t>, std::tuple<int64_t, int64_t, int64_t, bool>> seen;
  for (int64_t tp = 0; tp < 8; ++tp) {
    for (int64_t dp = 0; dp < 4; ++dp) {
      for (int64_t pp = 0; pp < 4; ++pp) {
        const auto s = streams_of(99, tp, dp, pp);
        INFO("tp " << tp << " dp " << dp << " pp " << pp);
        CHECK(seen.emplace(s.split, std::make_tuple(tp, dp, pp, true)).second);
        if (tp == 0) {
          CHECK(seen.emplace(s.replicated, std::make_tuple(tp, dp, pp, false)).second);
        } else {
          // The replicated stream is tp rank 0's, already seen.
          REQUIRE(seen.count(s.replicated) == 1);
          const auto [tp0, dp0, pp0, split] = seen.at(s.replicated);
          CHECK((tp0 == 0 && dp0 == dp && pp0 == pp && !split));
        }
      }
    }
  }
  CHECK(seen.size() == 8 * 4 * 4 + 4 * 4);
}

TEST_CASE("tp rng: the streams follow from the seed alone", "[tp_rng]") {
  DefaultGeneratorGuard guard;
  const auto first = streams_of(2024, 1, 1, 1);
  draws();  // whatever happened in between
  const auto again = streams_of(2024, 1, 1, 1);
  CHECK(again.replicated == first.replicated);
  CHECK(again.split == first.split);
  const auto other_seed = streams_of(2025, 1, 1, 1);
  CHECK(other_seed.replicated != first.replicated);
  CHECK(other_seed.split != first.split);
}

TEST_CASE("tp rng: state() and set_state() rewind both streams", "[tp_rng]") {
  DefaultGeneratorGuard guard;
  TensorParallelRng rng(5, 1, 0);
  draws();
  draws(&rng.split());
  const auto state = rng.state();
  const auto replicated = draws();
  const auto split = draws(&rng.split());
  draws();
  rng.set_state(state);
  CHECK(draws() == replicated);
  CHECK(draws(&rng.split()) == split);
  // A state restored into another rank's object puts its streams where this one's were.
  TensorParallelRng other(77, 3, 2);
  other.set_state(state);
  CHECK(draws() == replicated);
  CHECK(draws(&other.split()) == split);
  // The state has the replicated stream's length up front; less than both streams is refused.
  const int64_t replicated_bytes = state.narrow(0, 0, 8).clone().view(torch::kInt64).item<int64_t>();
  CHECK(replicated_bytes == at::detail::getDefaultCPUGenerator().get_state().numel());
  CHECK_THROWS_WITH(rng.set_state(state.narrow(0, 0, 8 + replicated_bytes)), Catch::Contains("truncated"));
}

TEST_CASE("tp rng: dropout keeps or scales each element, draws only from its generator", "[tp_rng]") {
  DefaultGeneratorGuard guard;
  const auto x = torch::linspace(1, 2, 1000);
  CHECK(loom::parallel::dropout(x, 0.3, false).is_same(x));  // evaluation
  CHECK(loom::parallel::dropout(x, 0.0, true).is_same(x));

  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto generator_state = generator.get_state();
  torch::manual_seed(8);
  const auto default_state = at::detail::getDefaultCPUGenerator().get_state();
  const auto y = loom::parallel::dropout(x, 0.25, true, &generator);
  // The default stream did not move: a split-region dropout must not shift the replicated masks.
  CHECK(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), default_state));
  const auto kept = y != 0;
  CHECK(torch::allclose(y.masked_select(kept), x.masked_select(kept) / 0.75));
  const double kept_share = kept.to(torch::kDouble).mean().item<double>();
  CHECK(kept_share == Approx(0.75).margin(0.05));  // 1000 Bernoulli(0.75): sd 0.014
  // The same generator state gives the same mask; another state another.
  generator.set_state(generator_state);
  CHECK(torch::equal(loom::parallel::dropout(x, 0.25, true, &generator), y));
  CHECK_FALSE(torch::equal(loom::parallel::dropout(x, 0.25, true, &generator), y));
  // Without a generator the mask comes from the default stream.
  const auto z = loom::parallel::dropout(x, 0.25, true);
  CHECK_FALSE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), default_state));
  torch::manual_seed(8);
  CHECK(torch::equal(loom::parallel::dropout(x, 0.25, true), z));
}
