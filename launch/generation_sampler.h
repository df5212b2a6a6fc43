// How `loom generate` picks the next token from the logits of the last position:
// greedy (temperature 0: the largest logit, the first on a tie) or sampled from
// softmax(logits / temperature), cut to the top-k tokens and then to the smallest
// set whose probability reaches top-p (nucleus sampling), as Hugging Face's
// generate applies them. Draws come from the sampler's own generator seeded by
// --seed, so a run repeats, and tp ranks holding the same logits draw alike.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <cstdint>

namespace loom::launch {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (top_k and top_p are then unused)
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // 1: no nucleus cut
  uint64_t seed = 0;
};

class TokenSampler {
 public:
  // Refuses (InputError, naming the flag) a negative temperature or top-k, or top-p outside (0, 1].
  explicit TokenSampler(const SamplingOptions& options);
  // LOGITS [V] of the next position -> its id.
  int64_t next(const torch::Tensor& logits);
  // The distribution next() draws from: softmax of the cut, scaled logits, fp64 (greedy: one-hot).
  torch::Tensor probabilities(const torch::Tensor& logits) const;

 private:
  SamplingOptions options_;
  at::Generator generator_;
};

}  // namespace loom::launch
