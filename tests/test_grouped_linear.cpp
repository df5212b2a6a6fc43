// The experts' grouped product (models/grouped_linear.h) against a loop of torch::linear over the
// experts: the output, the input's gradient and every expert's weight and bias gradient, with
// experts that get no rows, one expert that gets them all, and no rows at all.
#include <catch2/catch.hpp>
#include <vector>

#include "models/grouped_linear.h"
#include "optim/adamw.h"

using loom::models::grouped_linear;
using loom::models::grouped_linear_loop;

namespace {

struct Grads {
  torch::Tensor y, x, w, b;
};

Grads run(bool grouped, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
          const std::vector<int64_t>& rows, const torch::Tensor& upstream) {
  auto x = x0.clone().requires_grad_(true);
  auto w = w0.clone().requires_grad_(true);
  auto b = b0.defined() ? b0.clone().requires_grad_(true) : torch::Tensor();
  // The experts' weights as separate leaves stacked, as the MoE layer hands them in.
  auto y = grouped ? grouped_linear(x, w.unbind(0), b, rows) : grouped_linear_loop(x, w.unbind(0), b, rows);
  (y * upstream).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : torch::Tensor()};
}

void check_close(const torch::Tensor& got, const torch::Tensor& want, double tol) {
  REQUIRE(got.sizes() == want.sizes());
  const double err = want.numel() ? (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>() : 0;
  INFO("largest difference " << err);
  CHECK(err <= tol);
}

}  // namespace

TEST_CASE("grouped expert product equals a per-expert loop, forward and backward", "[moe][grouped]") {
  torch::manual_seed(11);
  const std::vector<std::vector<int64_t>> cases = {
      {3, 0, 5, 2}, {0, 0, 9, 0}, {1, 1, 1, 1}, {7, 4, 0, 6}, {0, 0, 0, 0}};
  // Widths whose rows are multiples of 16 bytes (ATen's _grouped_mm), and 6 and 10, whose rows are
  // not (an expert of 24 split over expert_tp 4): those take the product per group.
  for (auto [in, out] : {std::pair<int64_t, int64_t>{24, 40}, {6, 10}, {10, 6}})
    for (const auto& rows : cases) {
      for (bool bias : {false, true}) {
        for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64}) {
          int64_t total = 0;
          for (auto r : rows) total += r;
          auto options = torch::TensorOptions().dtype(dtype);
          auto x = torch::randn({total, in}).to(dtype);
          auto w = (torch::randn({4, out, in}) * 0.2).to(dtype);
          auto b = bias ? torch::randn({4, out}).to(dtype) : torch::Tensor();
          auto upstream = torch::randn({total, out}).to(dtype);
          INFO("rows " << torch::IntArrayRef(rows) << (bias ? " with" : " without") << " biases, " << options.dtype()
                       << ", " << in << " -> " << out);
          auto grouped = run(true, x, w, b, rows, upstream), loop = run(false, x, w, b, rows, upstream);
          // fp32: the same products summed in the same order up to the kernel's blocking; bf16: a
          // rounding of the output (1/256 relative) on values of a few units.
          // fp64 (products one by one, not _grouped_mm) to rounding.
          const double tol = dtype == torch::kFloat32 ? 1e-5 : dtype == torch::kFloat64 ? 1e-12 : 0.07;
          check_close(grouped.y, loop.y, tol);
          check_close(grouped.x, loop.x, tol);
          check_close(grouped.w, loop.w, tol);
          if (bias) check_close(grouped.b, loop.b, tol);
          // An expert with no rows gets a zero gradient, not none.
          for (size_t g = 0; g < rows.size(); ++g)
            if (rows[g] == 0) CHECK(grouped.w[g].abs().sum().item<double>() == 0.0);
        }
      }
    }
}

TEST_CASE("grouped expert product with rows counted on the device reads them only for a loop", "[moe][grouped]") {
  // Rows handed in as counts on the tensors' device (the MoE layer's on a GPU): the same values as
  // rows from the host, forward and backward; where _grouped_mm takes the operands (fp32 and bf16
  // on the CPU, bf16 on a GPU) the counts are never read on the host, which on a GPU is a wait.
  torch::manual_seed(12);
  const std::vector<int64_t> rows = {3, 0, 5, 2};
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64}) {
    INFO(torch::TensorOptions().dtype(dtype).dtype());
    auto x0 = torch::randn({10, 24}).to(dtype), w0 = (torch::randn({4, 40, 24}) * 0.2).to(dtype);
    auto upstream = torch::randn({10, 40}).to(dtype);
    auto once = [&](const loom::parallel::GroupRows& groups) {
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      auto y = grouped_linear(x, w.unbind(0), {}, groups);
      (y * upstream).sum().backward();
      return std::tuple{y.detach(), x.grad(), w.grad()};
    };
    loom::parallel::GroupRows counted(torch::tensor(rows, torch::kInt64), 10);
    auto [y, gx, gw] = once(counted);
    auto [y_host, gx_host, gw_host] = once(loom::parallel::GroupRows(rows));
    CHECK(torch::equal(y, y_host));
    CHECK(torch::equal(gx, gx_host));
    CHECK(torch::equal(gw, gw_host));
    CHECK(counted.on_host() == (dtype == torch::kFloat64));  // fp64 runs group by group
    CHECK(counted.host() == rows);
  }
}

TEST_CASE("grouped expert product refuses rows that do not add up", "[moe][grouped]") {
  auto x = torch::randn({5, 4});
  std::vector<torch::Tensor> w{torch::randn({3, 4}), torch::randn({3, 4})};
  CHECK_THROWS_WITH(grouped_linear(x, w, {}, std::vector<int64_t>{2, 2}), Catch::Contains("do not add up to x's 5"));
}

TEST_CASE("experts' weights packed into one storage are viewed, not copied, with the same results", "[moe][grouped]") {
  using loom::models::pack_into_one_storage;
  using loom::models::stacked_weights;
  torch::manual_seed(5);
  const std::vector<int64_t> rows = {3, 0, 5};
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO(dtype);
    auto x = torch::randn({8, 16}).to(dtype), upstream = torch::randn({8, 24}).to(dtype);
    // Three parameters of their own, as the MoE layer registers them.
    std::vector<torch::Tensor> weights;
    for (int g = 0; g < 3; ++g) weights.push_back((torch::randn({24, 16}) * 0.2).to(dtype).requires_grad_(true));
    const auto values = torch::stack(weights).detach().clone();
    auto products = [&] {
      for (auto& w : weights) w.mutable_grad().reset();
      auto xi = x.clone().requires_grad_(true);
      auto y = grouped_linear(xi, weights, torch::Tensor(), rows);
      (y * upstream).sum().backward();
      return std::vector<torch::Tensor>{y.detach(), xi.grad(), weights[0].grad(), weights[1].grad(), weights[2].grad()};
    };
    // Apart, the stack is a copy.
    CHECK(stacked_weights(weights).data_ptr() != weights[0].data_ptr());
    const auto before = products();
    const auto* object = weights[1].unsafeGetTensorImpl();
    pack_into_one_storage(weights);
    // The same parameter objects, still leaves that want gradients, their values unchanged, now
    // one after another in one storage: the stack is a view of it.
    CHECK(weights[1].unsafeGetTensorImpl() == object);
    CHECK(weights[1].is_leaf());
    CHECK(weights[1].requires_grad());
    CHECK(torch::equal(torch::stack(weights), values));
    CHECK(stacked_weights(weights).data_ptr() == weights[0].data_ptr());
    CHECK(weights[2].data_ptr() ==
          static_cast<char*>(weights[0].data_ptr()) + 2 * weights[0].numel() * weights[0].element_size());
    const auto after = products();
    for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
    // Packed twice: nothing moves.
    const auto* data = weights[0].data_ptr();
    pack_into_one_storage(weights);
    CHECK(weights[0].data_ptr() == data);
    // Out of order, one storage is not enough: stacked by copy, in the order given.
    const std::vector<torch::Tensor> swapped = {weights[1], weights[0], weights[2]};
    const auto stack = stacked_weights(swapped);
    CHECK(stack.data_ptr() != weights[0].data_ptr());
    CHECK(torch::equal(stack[0], weights[1]));
  }
}

TEST_CASE("experts' weights that are views into another buffer are not packed", "[moe][grouped]") {
  // As a ZeRO-2/3 unit's parameters are: views into its flat buffer, spaced apart.
  auto buffer = torch::randn({3 * (24 * 16 + 4) + 8});
  std::vector<torch::Tensor> weights;
  for (int g = 0; g < 3; ++g) weights.push_back(buffer.narrow(0, 8 + g * (24 * 16 + 4), 24 * 16).view({24, 16}));
  const auto* data = weights[1].data_ptr();
  loom::models::pack_into_one_storage(weights);
  CHECK(weights[1].data_ptr() == data);
  // Each owning its storage but two sharing one: left too.
  auto shared = torch::randn({24, 16});
  std::vector<torch::Tensor> tied = {shared, torch::randn({24, 16}), shared};
  loom::models::pack_into_one_storage(tied);
  CHECK(tied[0].data_ptr() == shared.data_ptr());
  CHECK(tied[2].data_ptr() == shared.data_ptr());
}

TEST_CASE("gate and up as one grouped product equal a product per kind, forward and backward", "[moe][grouped]") {
  // grouped_linear_kinds stacks each expert's weights of two kinds one above the other: its output
  // columns are the first kind's product then the second's, and each weight gets its own gradient.
  using loom::models::grouped_linear_kinds;
  torch::manual_seed(13);
  for (auto [in, out] : {std::pair<int64_t, int64_t>{24, 40}, {6, 10}})
    for (const auto& rows : std::vector<std::vector<int64_t>>{{3, 0, 5, 2}, {0, 0, 0, 0}})
      for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
        int64_t total = 0;
        for (auto r : rows) total += r;
        INFO("rows " << torch::IntArrayRef(rows) << ", " << in << " -> " << out << ", " << dtype);
        const auto x0 = torch::randn({total, in}).to(dtype);
        const auto gate0 = (torch::randn({4, out, in}) * 0.2).to(dtype),
                   up0 = (torch::randn({4, out, in}) * 0.2).to(dtype);
        const auto upstream = torch::randn({total, 2 * out}).to(dtype);
        auto once = [&](bool fused) {
          auto x = x0.clone().requires_grad_(true);
          auto gate = gate0.clone().requires_grad_(true), up = up0.clone().requires_grad_(true);
          auto y = fused ? grouped_linear_kinds(x, {gate.unbind(0), up.unbind(0)}, rows)
                         : torch::cat({grouped_linear_loop(x, gate.unbind(0), {}, rows),
                                       grouped_linear_loop(x, up.unbind(0), {}, rows)},
                                      1);
          (y * upstream).sum().backward();
          return std::vector<torch::Tensor>{y.detach(), x.grad(), gate.grad(), up.grad()};
        };
        const auto fused = once(true), apart = once(false);
        for (size_t i = 0; i < fused.size(); ++i)
          check_close(fused[i], apart[i], dtype == torch::kFloat32 ? 1e-5 : 1e-12);
      }
  auto x = torch::randn({5, 4});
  std::vector<torch::Tensor> narrow{torch::randn({3, 4}), torch::randn({3, 4})},
      wide{torch::randn({6, 4}), torch::randn({6, 4})};
  CHECK_THROWS_WITH(grouped_linear_kinds(x, {narrow, wide}, std::vector<int64_t>{2, 3}),
                    Catch::Contains("grouped_linear"));
}

TEST_CASE("gate and up packed expert by expert are viewed as one stack", "[moe][grouped]") {
  // The MoE layer packs gate 0, up 0, gate 1, ... into one storage on a GPU: the fused product then
  // reads the weights where they lie and gives what it gives unpacked.
  using loom::models::grouped_linear_kinds;
  using loom::models::pack_into_one_storage;
  torch::manual_seed(14);
  const std::vector<int64_t> rows = {3, 0, 5};
  auto x = torch::randn({8, 16}), upstream = torch::randn({8, 48});
  std::vector<torch::Tensor> gate, up, interleaved;
  for (int g = 0; g < 3; ++g) {
    gate.push_back((torch::randn({24, 16}) * 0.2).requires_grad_(true));
    up.push_back((torch::randn({24, 16}) * 0.2).requires_grad_(true));
    interleaved.insert(interleaved.end(), {gate.back(), up.back()});
  }
  auto products = [&] {
    for (auto& w : interleaved) w.mutable_grad().reset();
    auto y = grouped_linear_kinds(x, {gate, up}, rows);
    (y * upstream).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), gate[1].grad(), up[2].grad()};
  };
  const auto before = products();
  pack_into_one_storage(interleaved);
  CHECK(up[0].data_ptr() == static_cast<char*>(gate[0].data_ptr()) + gate[0].numel() * gate[0].element_size());
  const auto after = products();
  for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
}

TEST_CASE("experts' weights in AdamW's flat buffer are viewed where they lie, with the same results",
          "[moe][grouped]") {
  // AdamW moves the parameters into one buffer in their order (the decayed first): expert g's
  // gate, up and proj one after another, so each kind's weights lie one expert apart and gate g
  // and up g back to back. The products then stack nothing, and give what they give apart.
  using loom::models::grouped_linear_kinds;
  using loom::models::stacked_weights;
  torch::manual_seed(15);
  const std::vector<int64_t> rows = {3, 0, 5};
  auto x = torch::randn({8, 16}), upstream = torch::randn({8, 48}), upstream_proj = torch::randn({8, 16});
  std::vector<torch::Tensor> gate, up, proj, params;
  for (int g = 0; g < 3; ++g) {
    gate.push_back((torch::randn({24, 16}) * 0.2).requires_grad_(true));
    up.push_back((torch::randn({24, 16}) * 0.2).requires_grad_(true));
    params.insert(params.end(), {gate.back(), up.back(), torch::zeros({24}, torch::requires_grad())});
    proj.push_back((torch::randn({16, 24}) * 0.2).requires_grad_(true));
    params.push_back(proj.back());
  }
  auto products = [&] {
    for (auto& p : params) p.mutable_grad().reset();
    auto h = grouped_linear_kinds(x, {gate, up}, rows);
    auto y = grouped_linear(h.narrow(1, 0, 24) * h.narrow(1, 24, 24), proj, {}, rows);
    ((h * upstream).sum() + (y * upstream_proj).sum()).backward();
    return std::vector<torch::Tensor>{h.detach(), y.detach(), gate[1].grad(), up[2].grad(), proj[0].grad()};
  };
  const auto before = products();
  CHECK(stacked_weights(gate).data_ptr() != gate[0].data_ptr());
  loom::optim::AdamW adamw(params, {});
  REQUIRE(adamw.flat());
  const auto expert_apart = static_cast<char*>(gate[1].data_ptr()) - static_cast<char*>(gate[0].data_ptr());
  CHECK(expert_apart == (3 * 24 * 16) * 4);  // the biases went after the decayed weights
  CHECK(stacked_weights(gate).data_ptr() == gate[0].data_ptr());
  CHECK(stacked_weights(proj).data_ptr() == proj[0].data_ptr());
  CHECK(torch::equal(stacked_weights(proj)[2], proj[2]));
  const auto after = products();
  for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
  // Out of order they are copied, in the order given.
  const auto swapped = stacked_weights(std::vector<torch::Tensor>{gate[1], gate[0], gate[2]});
  CHECK(swapped.data_ptr() != gate[0].data_ptr());
  CHECK(torch::equal(swapped[0], gate[1]));
}
