#include "models/rms_norm_cpu.h"

#include <cmath>

#include "core/cpu_threads.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows per block: the unit the threads share and the weight's gradient is summed in.
constexpr int64_t kBlockRows = 64;

// The sum of TERM(i) over [0, N) in one fixed order: eight running sums (which the compiler keeps
// in vector registers), then the rest, then the eight added pairwise.
template <typename Term>
float fixed_order_sum(int64_t n, const Term& term) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += term(i + k);
  float rest = 0;
  for (; i < n; ++i) rest += term(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + rest;
}

// The gradients of X and WEIGHT by composed ops, each with its own graph.
variable_list differentiable_backward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& grad,
                                      double eps) {
  const auto inverse = torch::rsqrt(x.pow(2).mean(-1, true) + eps);
  const auto normed = x * inverse, grad_normed = grad * weight;
  auto grad_x = inverse * (grad_normed - normed * (grad_normed * normed).mean(-1, true));
  auto grad_w = (grad * normed).reshape({-1, x.size(-1)}).sum(0);
  return {grad_x, grad_w, torch::Tensor()};
}

struct RMSNormCpu : torch::autograd::Function<RMSNormCpu> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_, const torch::Tensor& weight_,
                               double eps) {
    const auto x = x_.contiguous(), weight = weight_.contiguous();
    const int64_t width = x.size(-1), rows = width == 0 ? 0 : x.numel() / width;
    auto y = torch::empty_like(x, torch::MemoryFormat::Contiguous);
    auto inverse_rms = torch::empty({rows}, x.options());
    const float *xs = x.data_ptr<float>(), *w = weight.data_ptr<float>();
    float *ys = y.data_ptr<float>(), *r = inverse_rms.data_ptr<float>();
    parallel_over_blocks(rows, kBlockRows, [&](int64_t first, int64_t end) {
      for (int64_t row = first; row < end; ++row) {
        const float* xr = xs + row * width;
        float* yr = ys + row * width;
        const double mean = static_cast<double>(fixed_order_sum(width, [&](int64_t i) { return xr[i] * xr[i]; })) /
                            static_cast<double>(width);
        const auto inv = static_cast<float>(1.0 / std::sqrt(mean + eps));
        r[row] = inv;
        for (int64_t i = 0; i < width; ++i) yr[i] = w[i] * (xr[i] * inv);  // Hugging Face's order
      }
    });
    ctx->save_for_backward({x, weight, inverse_rms});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &inverse_rms = saved[2];
    // A backward that builds a graph (create_graph, for a second derivative) gets the same
    // gradients from differentiable ops: the loops below would leave them without one.
    if (torch::GradMode::is_enabled())
      return differentiable_backward(x, weight, grads[0], ctx->saved_data["eps"].toDouble());
    const auto grad = grads[0].contiguous();
    const int64_t width = x.size(-1), rows = width == 0 ? 0 : x.numel() / width;
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    const bool want_x = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    torch::Tensor grad_x = want_x ? torch::empty_like(x) : torch::Tensor();
    // Each block's share of the weight's gradient, summed over the blocks in order below.
    torch::Tensor shares = want_w ? torch::zeros({blocks, width}, x.options()) : torch::Tensor();
    const float *xs = x.data_ptr<float>(), *w = weight.data_ptr<float>(), *gs = grad.data_ptr<float>(),
                *r = inverse_rms.data_ptr<float>();
    float* dxs = want_x ? grad_x.data_ptr<float>() : nullptr;
    float* share = want_w ? shares.data_ptr<float>() : nullptr;
    parallel_over_blocks(rows, kBlockRows, [&](int64_t first, int64_t end) {
      float* sr = want_w ? share + first / kBlockRows * width : nullptr;  // this block's share
      for (int64_t row = first; row < end; ++row) {
        const float *xr = xs + row * width, *gr = gs + row * width;
        const float inv = r[row];
        if (want_w)
          for (int64_t i = 0; i < width; ++i) sr[i] += gr[i] * (xr[i] * inv);
        if (!want_x) continue;
        // d x_k = r g_k w_k - x_k r^3 / n x sum_i g_i w_i x_i.
        const double along =
            static_cast<double>(fixed_order_sum(width, [&](int64_t i) { return gr[i] * w[i] * xr[i]; }));
        const auto scale = static_cast<float>(along * inv * inv * inv / static_cast<double>(width));
        float* dxr = dxs + row * width;
        for (int64_t i = 0; i < width; ++i) dxr[i] = inv * (gr[i] * w[i]) - xr[i] * scale;
      }
    });
    torch::Tensor grad_w;
    if (want_w) {
      grad_w = torch::zeros({width}, x.options());
      float* dw = grad_w.data_ptr<float>();
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t i = 0; i < width; ++i) dw[i] += share[b * width + i];
    }
    return {grad_x, grad_w, torch::Tensor()};
  }
};

}  // namespace

bool rms_norm_cpu_takes(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.device().is_cpu() && weight.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
         weight.scalar_type() == torch::kFloat32 && x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1);
}

torch::Tensor rms_norm_cpu(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(rms_norm_cpu_takes(x, weight), "rms_norm_cpu: x ", x.sizes(), " ", x.scalar_type(), " on ", x.device(),
              ", weight ", weight.sizes(), " ", weight.scalar_type());
  return RMSNormCpu::apply(x, weight, eps);
}

}  // namespace loom::models
