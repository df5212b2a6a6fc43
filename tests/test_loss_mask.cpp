// data.eod_mask_loss's pieces (core/loss_mask.h): which targets are left out, the factor that makes
// a mean over all targets the mean over those left, and the cross-entropy paths that read ignore_index.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "core/errors.h"
#include "core/loss_mask.h"
#include "parallel/comm_stats.h"
#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"

using namespace loom;

namespace {

// Tokens 0, 1, 2, ..., 9, 0, 1, ...: every tenth token is id 0.
class CyclingCorpus : public TokenCorpus {
 public:
  int64_t num_tokens() const override { return 1001; }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = (start + i) % 10;
  }
  std::string describe() const override { return "cycling corpus"; }
};

BlendedSampler sampler_of(const TokenCorpus& corpus, int64_t seq_len) {
  std::vector<std::unique_ptr<BatchSampler>> samplers;
  samplers.push_back(std::make_unique<BatchSampler>(corpus, seq_len, 10, false, 0));
  return BlendedSampler(std::move(samplers), {1.0});
}

}  // namespace

TEST_CASE("the target after an end-of-document token is ignored, others kept", "[loss_mask]") {
  Batch batch{torch::tensor({{5, 1, 5, 2}, {3, 5, 4, 4}}, torch::kInt64),
              torch::tensor({{1, 5, 2, 3}, {5, 4, 4, 6}}, torch::kInt64)};
  mask_targets_after_eod(batch, 5);
  CHECK(torch::equal(batch.targets, torch::tensor({{-100, 5, -100, 3}, {5, -100, 4, 6}}, torch::kInt64)));
  mask_targets_after_eod(batch, -1);  // off: nothing changes
  CHECK(batch.targets[1][0].item<int64_t>() == 5);
}

TEST_CASE("the factor is targets over targets left, over exactly the positions asked", "[loss_mask]") {
  CyclingCorpus corpus;
  const auto sampler = sampler_of(corpus, 7);  // sample i: tokens [7i, 7i + 7], inputs the first 7
  // Positions 0..2: inputs 0-6, 7-13, 14-20 hold id 0 at tokens 0, 10, 20: 3 of 21 targets ignored.
  CHECK(counted_target_factor(sampler, 0, 3, 0) == Approx(21.0 / 18.0));
  // Position 1 alone: inputs 7-13 hold token 10 (id 0).
  CHECK(counted_target_factor(sampler, 1, 1, 0) == Approx(7.0 / 6.0));
  // More samples than one read (32) of a chunk: 100 samples, 700 inputs, ids 0 at every tenth.
  CHECK(counted_target_factor(sampler, 0, 100, 0) == Approx(700.0 / 630.0));
  CHECK(counted_target_factor(sampler, 0, 3, -1) == 1.0);
  CHECK(counted_target_factor(sampler, 0, 3, 11) == 1.0);  // an id that never occurs
}

TEST_CASE("masking a one-sample batch leaves its tokens alone", "[loss_mask]") {
  // A one-sample batch's tokens and targets are views of one window: masking the targets in place
  // once wrote -100 into the tokens after each end-of-document (trained as a zero embedding).
  CyclingCorpus corpus;
  const auto sampler = sampler_of(corpus, 7);
  Batch batch = sampler.batch(1, 1);  // tokens 7..13 -> ids 7 8 9 0 1 2 3
  const auto tokens = batch.tokens.clone();
  mask_targets_after_eod(batch, 0);
  CHECK(torch::equal(batch.tokens, tokens));
  CHECK(torch::equal(batch.targets, torch::tensor({{8, 9, 0, -100, 2, 3, 4}}, torch::kInt64)));
}

TEST_CASE("data.eod_mask_loss finds its id or refuses", "[loss_mask]") {
  Config config;
  CHECK(resolve_eod_id(config) == -1);  // off
  config.data.eod_mask_loss = true;
  CHECK_THROWS_WITH(resolve_eod_id(config), Catch::Contains("data.eod_mask_loss: the built-in synthetic corpus"));
  config.data.eod_id = 7;
  CHECK(resolve_eod_id(config) == 7);
}

TEST_CASE("the vocabulary-parallel cross-entropy gives an ignored target no loss and no gradient", "[loss_mask]") {
  auto stats = std::make_shared<parallel::CommStats>();
  parallel::SelfCommunicator self("tp", 0, stats);
  torch::manual_seed(3);
  // 6 columns for a vocabulary of 5: the padded form (the autograd function), not LibTorch's own.
  auto logits = torch::randn({4, 6}, torch::kFloat64).requires_grad_(true);
  const auto targets = torch::tensor({1, -100, 4, -100}, torch::kInt64);
  auto losses = parallel::vocab_parallel_cross_entropy(logits, targets, 0, 5, self);
  losses.sum().backward();
  auto reference_logits = logits.detach().narrow(1, 0, 5).clone().requires_grad_(true);
  auto reference = at::cross_entropy_loss(reference_logits, targets, {}, at::Reduction::None);
  reference.sum().backward();
  CHECK(losses[1].item<double>() == 0.0);
  CHECK(losses[3].item<double>() == 0.0);
  CHECK(torch::allclose(losses, reference, 1e-12, 1e-12));
  CHECK(logits.grad()[1].abs().sum().item<double>() == 0.0);
  CHECK(torch::allclose(logits.grad().narrow(1, 0, 5), reference_logits.grad(), 1e-12, 1e-12));
  // The path where one rank holds the whole vocabulary (LibTorch's) agrees.
  auto whole = parallel::vocab_parallel_cross_entropy(logits.detach().narrow(1, 0, 5), targets, 0, 5, self);
  CHECK(torch::allclose(whole, reference, 1e-12, 1e-12));
}
