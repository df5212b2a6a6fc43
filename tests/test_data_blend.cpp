#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "core/blended_sampler.h"
#include "core/data_blend.h"
#include "core/errors.h"
#include "core/token_corpus.h"
#include "test_helpers.h"

using namespace loom;

namespace {

// Tokens start, start + 1, ...: a window's first token says where it came from.
class CountingCorpus : public TokenCorpus {
 public:
  CountingCorpus(int64_t n, int64_t start) : n_(n), start_(start) {}
  int64_t num_tokens() const override { return n_; }
  void read(int64_t start, int64_t count, int64_t* out) const override { std::iota(out, out + count, start_ + start); }
  std::string describe() const override { return "counting corpus from " + std::to_string(start_); }

 private:
  int64_t n_, start_;
};

BlendedSampler blend_of(const std::vector<const TokenCorpus*>& corpora, const std::vector<double>& weights,
                        bool shuffled) {
  std::vector<std::unique_ptr<BatchSampler>> samplers;
  for (size_t i = 0; i < corpora.size(); ++i) {
    samplers.push_back(std::make_unique<BatchSampler>(*corpora[i], 4, 1 << 30, shuffled, 7 + i));
  }
  return BlendedSampler(std::move(samplers), weights);
}

}  // namespace

TEST_CASE("a blend is weight and prefix pairs, weights normalised", "[data]") {
  const auto one = parse_blend("data/a", "data.path");
  REQUIRE(one.size() == 1);
  CHECK(one[0].prefix == "data/a");
  CHECK(one[0].weight == 1.0);
  const auto two = parse_blend("  3 data/a   1 data/b ", "data.path");
  REQUIRE(two.size() == 2);
  CHECK(two[0].weight == Approx(0.75));
  CHECK(two[1].prefix == "data/b");
  CHECK(parse_blend("", "data.path").empty());
  CHECK_THROWS_WITH(parse_blend("0.3 a 0.7", "data.path"), Catch::Contains("data.path") && Catch::Contains("pairs"));
  CHECK_THROWS_WITH(parse_blend("a 0.3 b 0.7", "data.valid_path"),
                    Catch::Contains("data.valid_path") && Catch::Contains("'a'"));
  CHECK_THROWS_WITH(parse_blend("0 a 1 b", "data.path"), Catch::Contains("positive weight"));
  // Each weight a finite double, their sum not: normalised by it they would all be 0.
  CHECK_THROWS_WITH(parse_blend("1e308 a 1e308 b", "data.path"),
                    Catch::Contains("data.path") && Catch::Contains("add up to more than a double holds"));
  const auto scaled = parse_blend("1e307 a 3e307 b", "data.path");
  CHECK(scaled[1].weight == Approx(0.75));
}

TEST_CASE("a split is up to three weights, normalised", "[data]") {
  const auto s = parse_split("969,30,1", "data.split");
  CHECK(s.train == Approx(0.969));
  CHECK(s.valid == Approx(0.03));
  CHECK(s.test == Approx(0.001));
  const auto two = parse_split("98, 2", "data.split");
  CHECK(two.valid == Approx(0.02));
  CHECK(two.test == 0.0);
  CHECK(parse_split("969/30/1", "data.split").valid == Approx(0.03));
  CHECK_THROWS_WITH(parse_split("a,b", "data.split"), Catch::Contains("data.split"));
  CHECK_THROWS_WITH(parse_split("1,2,3,4", "data.split"), Catch::Contains("one to three"));
  CHECK_THROWS_WITH(parse_split("0,1", "data.split"), Catch::Contains("nothing to train on"));
  CHECK_THROWS_WITH(parse_split("1e308,1e308", "data.split"), Catch::Contains("add up to more than a double holds"));
}

TEST_CASE("every prefix of a blend's order holds each dataset within one sample of its weight", "[data]") {
  CountingCorpus a(4001, 0), b(4001, 1000000), c(4001, 2000000);
  const std::vector<double> weights{0.2, 0.5, 0.3};
  auto blend = blend_of({&a, &b, &c}, weights, true);
  std::vector<int64_t> counts(3, 0);
  const int64_t n = 3 * BlendedSampler::kBlock + 17;  // across block boundaries
  for (int64_t i = 0; i < n; ++i) {
    const auto where = blend.locate(i);
    // Each dataset's own order is taken in turn.
    CHECK(where.position == counts[static_cast<size_t>(where.dataset)]);
    ++counts[static_cast<size_t>(where.dataset)];
    for (size_t d = 0; d < 3; ++d) {
      REQUIRE(std::fabs(static_cast<double>(counts[d]) - weights[d] * static_cast<double>(i + 1)) < 1.0);
    }
  }
  CHECK(blend.drawn_before(n) == counts);
}

TEST_CASE("a blend's order is a pure function of the position (resume anywhere)", "[data]") {
  CountingCorpus a(801, 0), b(401, 1000000);
  auto straight = blend_of({&a, &b}, {0.7, 0.3}, true);
  std::vector<int64_t> first_tokens;
  for (int64_t i = 0; i < 2 * BlendedSampler::kBlock + 5; i += 8) {
    first_tokens.push_back(straight.batch(i, 8).tokens.index({torch::indexing::Slice(), 0}).sum().item<int64_t>());
  }
  // A fresh sampler asked for late positions first (a resume) gives the same batches.
  auto resumed = blend_of({&a, &b}, {0.7, 0.3}, true);
  for (int64_t k = static_cast<int64_t>(first_tokens.size()) - 1; k >= 0; k -= 3) {
    const int64_t sum = resumed.batch(k * 8, 8).tokens.index({torch::indexing::Slice(), 0}).sum().item<int64_t>();
    CHECK(sum == first_tokens[static_cast<size_t>(k)]);
  }
  // Tokens come from the dataset the position was given to.
  const auto where = straight.locate(5);
  const int64_t token = straight.batch(5, 1).tokens[0][0].item<int64_t>();
  CHECK((token >= 1000000) == (where.dataset == 1));
}

TEST_CASE("epochs count per dataset: the small one wraps first", "[data]") {
  CountingCorpus a(401, 0), b(41, 1000000);  // 100 and 10 samples of 4 tokens
  auto blend = blend_of({&a, &b}, {0.5, 0.5}, false);
  CHECK(blend.epochs_at(0) == std::vector<int64_t>{1, 1});
  CHECK(blend.epochs_at(20) == std::vector<int64_t>{1, 1});  // 10 of each: b's first epoch just complete
  CHECK(blend.epochs_at(22) == std::vector<int64_t>{1, 2});
  CHECK(blend.epochs_at(202) == std::vector<int64_t>{2, 11});
}

TEST_CASE("a slice reads its part of the corpus; splits cut at document starts", "[data]") {
  CountingCorpus whole(100, 0);
  SliceCorpus slice(whole, 90, 10, "validation");
  std::vector<int64_t> out(3);
  slice.read(2, 3, out.data());
  CHECK(out == std::vector<int64_t>{92, 93, 94});
  CHECK(slice.num_tokens() == 10);
  CHECK_THAT(slice.describe(), Catch::Contains("validation part") && Catch::Contains("90 to 100"));
  CHECK(whole.document_boundary(37) == 37);
}

TEST_CASE("an indexed corpus cuts at its documents and knows its largest id", "[data]") {
  const std::string prefix = test::temp_dir("doc_boundary") + "/ds";
  {
    IndexedDatasetWriter writer(prefix, TokenDtype::u16);
    writer.add_document({1, 2, 3, 4});    // tokens 0-3
    writer.add_document({5, 6});          // 4-5
    writer.add_document({7, 8, 900, 9});  // 6-9
    writer.finish();
  }
  IndexedCorpus corpus(prefix, "data.valid_path");
  CHECK(corpus.document_boundary(0) == 0);
  CHECK(corpus.document_boundary(1) == 4);
  CHECK(corpus.document_boundary(5) == 6);
  CHECK(corpus.document_boundary(7) == 10);  // past the last start: the end
  CHECK_THAT(corpus.describe(), Catch::StartsWith("data.valid_path '"));
  CHECK(IndexedDataset(prefix).max_token_id() == 900);
}
