#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>

#include "core/batch_sampler.h"
#include "core/errors.h"

using namespace loom;

namespace {

// Tokens 0, 1, 2, ...: a token's value is its position, so windows are easy to read.
class CountingCorpus : public TokenCorpus {
 public:
  explicit CountingCorpus(int64_t n) : n_(n) {}
  int64_t num_tokens() const override { return n_; }
  void read(int64_t start, int64_t count, int64_t* out) const override { std::iota(out, out + count, start); }
  std::string describe() const override { return "counting corpus"; }

 private:
  int64_t n_;
};

}  // namespace

TEST_CASE("sequential sample i is tokens [i*S, i*S + S] with shifted targets", "[data]") {
  CountingCorpus corpus(101);  // (101 - 1) / 10 = 10 samples
  BatchSampler sampler(corpus, 10, 1000, false, 0);
  CHECK(sampler.num_samples() == 10);
  Batch b = sampler.batch(3, 2);
  CHECK(b.tokens[0][0].item<int64_t>() == 30);
  CHECK(b.tokens[0][9].item<int64_t>() == 39);
  CHECK(b.targets[0][9].item<int64_t>() == 40);
  CHECK(b.tokens[1][0].item<int64_t>() == 40);
  // Past the end the order starts over.
  CHECK(sampler.sample_at(12) == 2);
}

TEST_CASE("global batches split contiguously into dp ranks and then micro-batches", "[data]") {
  // G = 8, dp = 2, micro = 2: step 1 (consumed 8) gives rank 1 positions 12..15.
  CHECK(micro_batch_start(8, 8, 2, 1, 2, 0) == 12);
  CHECK(micro_batch_start(8, 8, 2, 1, 2, 1) == 14);
  CHECK(micro_batch_start(8, 8, 2, 0, 2, 1) == 10);
  CHECK(micro_batch_start(0, 8, 1, 0, 2, 3) == 6);
}

TEST_CASE("shuffled order is a seeded permutation per epoch", "[data]") {
  CountingCorpus corpus(1001);
  BatchSampler a(corpus, 10, 2000, true, 42), b(corpus, 10, 2000, true, 42), c(corpus, 10, 2000, true, 43);
  std::vector<int64_t> epoch0, epoch1, other;
  for (int64_t i = 0; i < 100; ++i) {
    epoch0.push_back(a.sample_at(i));
    other.push_back(c.sample_at(i));
  }
  for (int64_t i = 100; i < 200; ++i) epoch1.push_back(a.sample_at(i));
  for (int64_t i = 0; i < 100; ++i) CHECK(b.sample_at(i) == epoch0[i]);
  CHECK(epoch0 != other);
  CHECK(epoch0 != epoch1);
  auto sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  CHECK(sorted == all);
}

TEST_CASE("tokens outside the vocabulary and tiny corpora are input errors", "[data]") {
  CountingCorpus corpus(101);
  BatchSampler sampler(corpus, 10, 50, false, 0);
  CHECK_NOTHROW(sampler.batch(0, 4));
  CHECK_THROWS_WITH(sampler.batch(4, 2), Catch::Contains("model.vocab_size = 50"));
  CountingCorpus tiny(5);
  CHECK_THROWS_AS(BatchSampler(tiny, 10, 50, false, 0), InputError);
}

TEST_CASE("the synthetic corpus is deterministic from the seed", "[data]") {
  SyntheticCorpus a(64, 1000, 7), b(64, 1000, 7), c(64, 1000, 8);
  std::vector<int64_t> ta(1000), tb(1000), tc(1000);
  a.read(0, 1000, ta.data());
  b.read(0, 1000, tb.data());
  c.read(0, 1000, tc.data());
  CHECK(ta == tb);
  CHECK(ta != tc);
  CHECK(*std::max_element(ta.begin(), ta.end()) < 64);
}
