#include "launch/generation_sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <limits>

#include "core/errors.h"

namespace loom::launch {

TokenSampler::TokenSampler(const SamplingOptions& options)
    : options_(options), generator_(at::make_generator<at::CPUGeneratorImpl>(options.seed)) {
  if (!(options.temperature >= 0)) throw InputError("--temperature must be 0 (greedy) or positive");
  if (options.top_k < 0) throw InputError("--top-k must be 0 (every token) or positive");
  if (!(options.top_p > 0 && options.top_p <= 1)) throw InputError("--top-p must be in (0, 1]");
}

torch::Tensor TokenSampler::probabilities(const torch::Tensor& logits) const {
  auto scores = logits.to(torch::kDouble).reshape({-1});
  const int64_t vocab = scores.size(0);
  if (options_.temperature == 0) return torch::one_hot(scores.argmax(), vocab).to(torch::kDouble);
  scores = scores / options_.temperature;
  const double minus_infinity = -std::numeric_limits<double>::infinity();
  if (options_.top_k > 0 && options_.top_k < vocab) {
    // Ties with the k-th largest stay in, as in Hugging Face's TopKLogitsWarper.
    const auto kth = std::get<0>(scores.topk(options_.top_k)).min();
    scores = scores.masked_fill(scores < kth, minus_infinity);
  }
  if (options_.top_p < 1) {
    // Kept: the most probable tokens until their probability reaches top_p (at least one).
    const auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/true);
    const auto probs = torch::softmax(sorted, 0);
    const auto before = probs.cumsum(0) - probs;  // the probability of the tokens ranked above each
    const auto cut = (before >= options_.top_p).index_put_({0}, false);
    scores = scores.index_put({order.masked_select(cut)}, torch::full({}, minus_infinity, scores.options()));
  }
  return torch::softmax(scores, 0);
}

int64_t TokenSampler::next(const torch::Tensor& logits) {
  if (options_.temperature == 0) return logits.reshape({-1}).argmax().item<int64_t>();
  // Inverse CDF with one uniform draw: the same draw and sums on every rank with the same logits.
  const auto probs = probabilities(logits);
  const double u = torch::rand({1}, generator_, torch::kDouble).item<double>();
  const auto cumulative = probs.cumsum(0);
  const int64_t id = (cumulative <= u * cumulative[-1]).sum().item<int64_t>();
  // u * total can reach the last nonzero entry's sum only through rounding: stay on a token that can be drawn.
  const auto drawable = probs.nonzero().reshape({-1});
  return std::min(id, drawable[-1].item<int64_t>());
}

}  // namespace loom::launch
