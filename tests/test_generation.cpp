// loom generate's choice of the next token (greedy, temperature, top-k and top-p against
// distributions worked by hand, draws that repeat with a seed) and its streaming of text.
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "core/errors.h"
#include "launch/generation_sampler.h"
#include "launch/text_stream.h"

using namespace loom;
using namespace loom::launch;

namespace {

SamplingOptions sampling(double temperature, int64_t top_k, double top_p, uint64_t seed = 0) {
  return SamplingOptions{temperature, top_k, top_p, seed};
}

// Logits whose softmax is P.
torch::Tensor logits_of(const std::vector<double>& p) {
  return torch::tensor(p, torch::kDouble).log().to(torch::kFloat);
}

}  // namespace

TEST_CASE("Temperature 0 is greedy: the largest logit, the first on a tie", "[sampler]") {
  TokenSampler greedy(sampling(0, 5, 0.5));
  CHECK(greedy.next(torch::tensor({0.1f, 3.0f, -1.0f, 3.0f})) == 1);
  CHECK(greedy.next(torch::tensor({4.0f, 3.0f})) == 0);
}

TEST_CASE("Temperature, top-k and top-p shape the distribution as Hugging Face's warpers do", "[sampler]") {
  const auto l = logits_of({0.5, 0.25, 0.15, 0.1});
  auto p = TokenSampler(sampling(1, 0, 1)).probabilities(l);
  CHECK(p[2].item<double>() == Approx(0.15));
  // Temperature 0.5 squares the probabilities before normalising.
  p = TokenSampler(sampling(0.5, 0, 1)).probabilities(l);
  CHECK(p[0].item<double>() == Approx(0.25 / (0.25 + 0.0625 + 0.0225 + 0.01)));
  // Top-2: the two largest, renormalised.
  p = TokenSampler(sampling(1, 2, 1)).probabilities(l);
  CHECK(p[0].item<double>() == Approx(2.0 / 3));
  CHECK(p[2].item<double>() == 0);
  // Top-p 0.7: 0.5 falls short, 0.5 + 0.25 reaches it: two tokens kept; 0.75 keeps three.
  p = TokenSampler(sampling(1, 0, 0.7)).probabilities(l);
  CHECK(p[1].item<double>() == Approx(1.0 / 3));
  CHECK(p[2].item<double>() == 0);
  p = TokenSampler(sampling(1, 0, 0.76)).probabilities(l);
  CHECK(p[2].item<double>() == Approx(0.15 / 0.9));
  CHECK(p[3].item<double>() == 0);
  // A tiny top-p keeps the most probable token alone.
  p = TokenSampler(sampling(1, 0, 1e-9)).probabilities(l);
  CHECK(p[0].item<double>() == 1);
}

TEST_CASE("Draws follow the distribution, never leave the cut and repeat with a seed", "[sampler]") {
  const auto l = logits_of({0.5, 0.25, 0.15, 0.1});
  TokenSampler a(sampling(1, 3, 1, 7)), b(sampling(1, 3, 1, 7)), c(sampling(1, 3, 1, 8));
  std::vector<int64_t> counts(4, 0);
  std::vector<int64_t> draws_a, draws_c;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const int64_t id = a.next(l);
    CHECK(id == b.next(l));
    draws_a.push_back(id);
    draws_c.push_back(c.next(l));
    ++counts[static_cast<size_t>(id)];
  }
  CHECK(counts[3] == 0);  // outside the top 3
  // Expected 0.5 / 0.9 of the draws; 5 standard deviations is about 0.04.
  CHECK(std::abs(static_cast<double>(counts[0]) / n - 0.5 / 0.9) < 0.04);
  CHECK(draws_a != draws_c);
}

TEST_CASE("The sampler refuses options outside their range, naming the flag", "[sampler]") {
  CHECK_THROWS_WITH(TokenSampler(sampling(-1, 0, 1)), Catch::Contains("--temperature"));
  CHECK_THROWS_WITH(TokenSampler(sampling(1, -2, 1)), Catch::Contains("--top-k"));
  CHECK_THROWS_WITH(TokenSampler(sampling(1, 0, 0)), Catch::Contains("--top-p"));
  CHECK_THROWS_AS(TokenSampler(sampling(1, 0, 1.5)), InputError);
}

TEST_CASE("Streamed text holds back a character whose bytes are not all there yet", "[sampler]") {
  CHECK(complete_utf8_prefix("ab") == 2);
  CHECK(complete_utf8_prefix("a\xC3") == 1);              // é's first byte
  CHECK(complete_utf8_prefix("a\xC3\xA9") == 3);          // é whole
  CHECK(complete_utf8_prefix("a\xF0\x9F\x98") == 1);      // 3 of an emoji's 4 bytes
  CHECK(complete_utf8_prefix("a\xF0\x9F\x98\x80") == 5);  // the emoji whole
  ByteTokenizer bytes;
  std::ostringstream out;
  TextStream stream(bytes, out);
  stream.add('h');
  CHECK(out.str() == "h");
  stream.add(0xE2);  // the first two bytes of '€' (E2 82 AC)
  stream.add(0x82);
  CHECK(out.str() == "h");
  stream.add(0xAC);
  CHECK(out.str() == "h\xE2\x82\xAC");
  stream.add(0xC3);
  stream.finish();  // what is held back is written at the end, whole or not
  CHECK(out.str() == "h\xE2\x82\xAC\xC3");
}

// A stand-in for SentencePiece's byte fallback: a lone lead-byte piece decodes as U+FFFD until the
// piece after it completes the character.
class FallbackTokenizer : public ByteTokenizer {
 public:
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text = ByteTokenizer::decode(ids);
    if (!text.empty() && static_cast<unsigned char>(text.back()) == 0xC4)
      text.replace(text.size() - 1, 1, "\xEF\xBF\xBD");
    return text;
  }
};

TEST_CASE("Streamed text waits for a byte-fallback character its decoder shows as U+FFFD", "[sampler]") {
  FallbackTokenizer tokenizer;
  std::ostringstream out;
  TextStream stream(tokenizer, out);
  stream.add('a');
  stream.add(0xC4);  // '\u0117' is C4 97: decoded alone, the lead byte is U+FFFD
  CHECK(out.str() == "a");
  stream.add(0x97);
  stream.add('x');
  stream.finish();
  CHECK(out.str() == "a\xC4\x97x");  // the decoder's whole text, no U+FFFD, no byte lost
}
