#include <ATen/CPUGeneratorImpl.h>

#include <catch2/catch.hpp>

#include "parallel/recompute.h"
#include "parallel/tp_rng.h"

using loom::parallel::RecomputedFn;

namespace {

struct DefaultGeneratorGuard {
  torch::Tensor saved = at::detail::getDefaultCPUGenerator().get_state();
  ~DefaultGeneratorGuard() {
    auto generator = at::detail::getDefaultCPUGenerator();  // a handle: the const reference cannot set
    generator.set_state(saved);
  }
};

// A piece of a transformer block: a weight captured from outside (as a module's would be),
// dropout from the split stream on one branch and from the default stream on the other.
struct Piece {
  torch::Tensor weight;
  at::Generator* split;
  int calls = 0;
  RecomputedFn fn = [this](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor&) {
    ++calls;
    auto hidden = loom::parallel::dropout(torch::gelu(a.matmul(weight)) * b, 0.5, true, split);
    return hidden + loom::parallel::dropout(torch::tanh(a).sum(-1, true), 0.3, true);
  };
};

struct Run {
  torch::Tensor output, grad_input, grad_b, grad_weight;
  torch::Tensor next_default, next_split;  // the streams' next draws after backward
  int calls = 0;
};

// Forward, some other layer's draws from both streams, backward; RECOMPUTE or plainly.
Run run(bool recompute) {
  torch::manual_seed(17);
  auto split = at::make_generator<at::CPUGeneratorImpl>(23);
  torch::manual_seed(31);
  const auto input = torch::randn({6, 4}).requires_grad_(true);
  const auto b = torch::randn({6, 5}).requires_grad_(true);
  const auto upstream = torch::randn({6, 5});
  Piece piece{torch::randn({4, 5}).requires_grad_(true), &split};
  torch::manual_seed(101);
  const auto a = input * 1.5;  // the recomputed piece sits inside a larger graph
  const auto output = recompute ? loom::parallel::recompute_in_backward(piece.fn, &split, a, b) : piece.fn(a, b, {});
  // Later layers draw their own masks between this forward and its backward.
  torch::rand({3});
  torch::rand({3}, split);
  (output * upstream).sum().backward();
  return {output.detach(),         input.grad(), b.grad(), piece.weight.grad(), torch::rand({4}),
          torch::rand({4}, split), piece.calls};
}

}  // namespace

TEST_CASE("recompute: outputs and gradients equal a plain run's, dropout included", "[recompute]") {
  DefaultGeneratorGuard guard;
  const auto plain = run(false);
  const auto recomputed = run(true);
  CHECK(plain.calls == 1);
  CHECK(recomputed.calls == 2);  // forward, and again in backward
  CHECK(torch::equal(recomputed.output, plain.output));
  REQUIRE(recomputed.grad_input.defined());
  REQUIRE(recomputed.grad_b.defined());
  REQUIRE(recomputed.grad_weight.defined());
  CHECK(torch::equal(recomputed.grad_input, plain.grad_input));
  CHECK(torch::equal(recomputed.grad_b, plain.grad_b));
  CHECK(torch::equal(recomputed.grad_weight, plain.grad_weight));
  // Backward's re-run leaves both streams where the plain run's are.
  CHECK(torch::equal(recomputed.next_default, plain.next_default));
  CHECK(torch::equal(recomputed.next_split, plain.next_split));
}

TEST_CASE("recompute: the comparison sees a re-run with other masks", "[recompute]") {
  DefaultGeneratorGuard guard;
  // Without the rewind, backward's re-run would draw the masks that come next: the
  // gradients would differ. Both streams drop something here, so a shifted mask shows.
  torch::manual_seed(31);
  const auto a = torch::randn({6, 4});
  const auto b = torch::randn({6, 5});
  auto split = at::make_generator<at::CPUGeneratorImpl>(23);
  Piece piece{torch::randn({4, 5}), &split};
  torch::manual_seed(101);
  const auto first = piece.fn(a, b, {});
  const auto second = piece.fn(a, b, {});
  CHECK_FALSE(torch::equal(first, second));
  CHECK((first == 0).any().item<bool>());
}

TEST_CASE("recompute: unused inputs, inputs without gradients and no split generator", "[recompute]") {
  DefaultGeneratorGuard guard;
  RecomputedFn fn = [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
    CHECK(c.numel() == 0);  // the placeholder for an unused slot
    return loom::parallel::dropout(torch::sin(a) * b, 0.5, true);
  };
  torch::manual_seed(5);
  const auto a = torch::randn({8}).requires_grad_(true);
  const auto b = torch::randn({8});  // a constant: no gradient wanted
  torch::manual_seed(6);
  const auto plain = fn(a, b, torch::empty({0}));
  plain.sum().backward();
  const auto plain_grad = a.grad().clone();
  a.mutable_grad() = torch::Tensor();

  torch::manual_seed(6);
  const auto out = loom::parallel::recompute_in_backward(fn, nullptr, a, b);
  CHECK(torch::equal(out, plain));
  CHECK(out.requires_grad());
  out.sum().backward();
  CHECK(torch::equal(a.grad(), plain_grad));
  CHECK_FALSE(b.requires_grad());

  // One input only: the other two slots are placeholders.
  RecomputedFn square = [](const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& z) {
    CHECK(y.numel() == 0);
    CHECK(z.numel() == 0);
    return x * x;
  };
  const auto x = torch::tensor({1.0f, -2.0f, 3.0f}).requires_grad_(true);
  loom::parallel::recompute_in_backward(square, nullptr, x).sum().backward();
  CHECK(torch::equal(x.grad(), torch::tensor({2.0f, -4.0f, 6.0f})));
}
