// Each tensor-parallel piece against its dense counterpart, on real processes:
// every rank of the world is one tp group (run at tp = 2 and 4). Outputs and
// gradients must equal the dense ones (or their matching slice) within 1e-6.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "check_close.h"
#include "multirank_world.h"
#include "parallel/init.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_regions.h"

using namespace loom::parallel;
using loom::test::check_close;

namespace {

loom::test::MultiRankWorld* g_world = nullptr;  // set once in main

Communicator& tp() {
  return g_world->groups.tp();
}

// The same random tensor on every rank.
torch::Tensor shared_randn(torch::IntArrayRef shape, uint64_t seed) {
  return init_normal(seed, "test-input", shape, 1.0);
}

torch::Tensor tp_slice(const torch::Tensor& x, int64_t dim) {
  return slice_along(x, dim, tp());
}

}  // namespace

TEST_CASE("region functions and their duals", "[tp]") {
  const int t = tp().size(), r = tp().rank();
  auto x = shared_randn({2, 4 * t, 3 * t}, 1).requires_grad_(true);
  auto g = shared_randn({2, 4 * t, 3 * t}, 2) * (r + 1);  // a different upstream gradient on each rank
  double ranks_sum = t * (t + 1) / 2.0;
  auto g_sum = shared_randn({2, 4 * t, 3 * t}, 2) * ranks_sum;

  auto y = copy_to_tp_region(x, tp());
  check_close(y, x, "copy_to forward is the identity");
  y.backward(g);
  check_close(x.grad(), g_sum, "copy_to backward all-reduces");

  x.mutable_grad().zero_();
  auto z = reduce_from_tp_region(x * (r + 1), tp());
  check_close(z, x * ranks_sum, "reduce_from forward all-reduces");
  z.backward(g);
  check_close(x.grad(), g * (r + 1), "reduce_from backward is the identity (times the local factor)");

  x.mutable_grad().zero_();
  auto s = scatter_to_tp_region(x, tp());
  check_close(s, tp_slice(x, 2), "scatter keeps this rank's slice of the last dim");
  s.backward(tp_slice(g_sum, 2));
  check_close(x.grad(), g_sum, "scatter backward all-gathers");

  auto part = tp_slice(x.detach(), 2).requires_grad_(true);
  auto full = gather_from_tp_region(part, tp());
  check_close(full, x, "gather forward all-gathers the last dim");
  full.backward(g_sum);
  check_close(part.grad(), tp_slice(g_sum, 2), "gather backward keeps the slice");

  auto seq = tp_slice(x.detach(), 1).requires_grad_(true);
  auto gathered = gather_from_sequence_region(seq, tp());
  check_close(gathered, x, "sequence gather forward");
  gathered.backward(g);
  check_close(seq.grad(), tp_slice(g_sum, 1), "sequence gather backward reduce-scatters");

  x.mutable_grad().zero_();
  auto rs = reduce_scatter_to_sequence_region(x * (r + 1), tp());
  check_close(rs, tp_slice(x * ranks_sum, 1), "sequence reduce-scatter forward");
  rs.backward(tp_slice(g_sum, 1));
  check_close(x.grad(), g_sum * (r + 1), "sequence reduce-scatter backward all-gathers");

  x.mutable_grad().zero_();
  auto sc = scatter_to_sequence_region(x, tp());
  check_close(sc, tp_slice(x, 1), "sequence scatter forward");
  sc.backward(tp_slice(g_sum, 1));
  check_close(x.grad(), g_sum, "sequence scatter backward all-gathers");
}

TEST_CASE("ColumnParallelLinear equals the dense layer's slice", "[tp]") {
  const int t = tp().size();
  const int64_t in = 6, out = 4 * t;
  for (bool sequence_parallel : {false, true}) {
    for (bool gather_output : {false, true}) {
      INFO("sequence_parallel " << sequence_parallel << ", gather_output " << gather_output);
      ColumnParallelLinear layer(ColumnParallelLinearOptions(in, out)
                                     .name("col")
                                     .seed(3)
                                     .gather_output(gather_output)
                                     .sequence_parallel(sequence_parallel),
                                 tp());
      auto w = init_normal(3, "col.weight", {out, in}, 0.02).requires_grad_(true);
      CHECK(torch::equal(layer->weight, tp_slice(w.detach(), 0)));
      auto b = shared_randn({out}, 4).requires_grad_(true);
      {
        torch::NoGradGuard no_grad;
        layer->bias.copy_(tp_slice(b.detach(), 0));
      }
      auto x = shared_randn({2, 2 * t, in}, 5).requires_grad_(true);
      auto g = shared_randn({2, 2 * t, out}, 6);
      auto dense = torch::linear(x, w, b);
      dense.backward(g);

      auto x_in = (sequence_parallel ? tp_slice(x.detach(), 1) : x.detach().clone()).requires_grad_(true);
      auto y = layer->forward(x_in);
      check_close(y, gather_output ? dense.detach() : tp_slice(dense.detach(), 2), "output");
      y.backward(gather_output ? g : tp_slice(g, 2));
      check_close(x_in.grad(), sequence_parallel ? tp_slice(x.grad(), 1) : x.grad(), "input gradient");
      check_close(layer->weight.grad(), tp_slice(w.grad(), 0), "weight gradient");
      check_close(layer->bias.grad(), tp_slice(b.grad(), 0), "bias gradient");
    }
  }
}

TEST_CASE("RowParallelLinear equals the dense layer", "[tp]") {
  const int t = tp().size();
  const int64_t in = 4 * t, out = 5;
  for (bool sequence_parallel : {false, true}) {
    for (bool input_is_parallel : {false, true}) {
      INFO("sequence_parallel " << sequence_parallel << ", input_is_parallel " << input_is_parallel);
      RowParallelLinear layer(RowParallelLinearOptions(in, out)
                                  .name("row")
                                  .seed(7)
                                  .input_is_parallel(input_is_parallel)
                                  .sequence_parallel(sequence_parallel),
                              tp());
      auto w = init_normal(7, "row.weight", {out, in}, 0.02).requires_grad_(true);
      CHECK(torch::equal(layer->weight, tp_slice(w.detach(), 1)));
      auto b = shared_randn({out}, 8).requires_grad_(true);
      {
        torch::NoGradGuard no_grad;
        layer->bias.copy_(b.detach());
      }
      auto x = shared_randn({2, 2 * t, in}, 9).requires_grad_(true);
      auto g = shared_randn({2, 2 * t, out}, 10);
      auto dense = torch::linear(x, w, b);
      dense.backward(g);

      auto x_in = (input_is_parallel ? tp_slice(x.detach(), 2) : x.detach().clone()).requires_grad_(true);
      auto y = layer->forward(x_in);
      check_close(y, sequence_parallel ? tp_slice(dense.detach(), 1) : dense.detach(), "output");
      y.backward(sequence_parallel ? tp_slice(g, 1) : g);
      check_close(x_in.grad(), input_is_parallel ? tp_slice(x.grad(), 2) : x.grad(), "input gradient");
      check_close(layer->weight.grad(), tp_slice(w.grad(), 1), "weight gradient");
      // With sequence parallelism each rank holds the bias gradient of its part of the sequence.
      auto bias_grad = layer->bias.grad().clone();
      if (sequence_parallel) tp().all_reduce(bias_grad).wait();
      check_close(bias_grad, b.grad(), "bias gradient");
    }
  }
}

TEST_CASE("VocabParallelEmbedding equals the dense embedding, padding included", "[tp]") {
  const int t = tp().size();
  const int64_t vocab = 4 * t + 1, dim = 3;  // never divisible by t: padded
  VocabParallelEmbedding embedding(VocabParallelEmbeddingOptions(vocab, dim).name("emb").seed(11), tp());
  CHECK(embedding->padded_vocab() == 4 * t + t);
  auto w = init_normal(11, "emb", {vocab, dim}, 0.02).requires_grad_(true);
  auto padded = torch::cat({w.detach(), torch::zeros({t - 1, dim})});
  CHECK(torch::equal(embedding->weight, tp_slice(padded, 0)));

  auto tokens = torch::arange(2 * 2 * t).view({2, 2 * t}).remainder(vocab);
  auto g = shared_randn({2, 2 * t, dim}, 12);
  auto dense = torch::embedding(w, tokens);
  dense.backward(g);
  auto y = embedding->forward(tokens);
  check_close(y, dense.detach(), "output");
  y.backward(g);
  auto padded_grad = torch::cat({w.grad(), torch::zeros({t - 1, dim})});
  check_close(embedding->weight.grad(), tp_slice(padded_grad, 0), "weight gradient");
}

TEST_CASE("vocab-parallel cross-entropy equals the dense one without gathering logits", "[tp]") {
  const int t = tp().size();
  const int64_t vocab = 3 * t + 1, padded = 4 * t, n = 7;
  auto logits = (shared_randn({n, vocab}, 13) * 3).requires_grad_(true);
  auto targets = torch::tensor(std::vector<int64_t>{0, 1, vocab - 1, 2, 3 * t, vocab / 2, 1});
  auto dense = torch::nn::functional::cross_entropy(
      logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  auto g = shared_randn({n}, 14);
  dense.backward(g);

  auto padded_logits = torch::cat({logits.detach(), torch::full({n, padded - vocab}, 1e4)}, 1);  // pad must never win
  auto local = tp_slice(padded_logits, 1).requires_grad_(true);
  auto loss = vocab_parallel_cross_entropy(local, targets, tp().rank() * (padded / t), vocab, tp());
  check_close(loss, dense.detach(), "per-token loss");
  loss.backward(g);
  auto padded_grad = torch::cat({logits.grad(), torch::zeros({n, padded - vocab})}, 1);
  check_close(local.grad(), tp_slice(padded_grad, 1), "logit gradient");
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  loom::test::MultiRankWorld world([](int64_t n) { return n; });
  g_world = &world;
  const int failed = Catch::Session().run(argc, argv);
  world.groups.world_comm().barrier().wait();
  return failed == 0 ? 0 : 1;
}
