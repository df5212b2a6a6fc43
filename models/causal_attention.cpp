#include "models/causal_attention.h"

#include <cmath>
#include <limits>

#include "core/blas_threads.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [S, d] views of one head's q, k or v (PART 0, 1, 2) in qkv viewed as [B, S, heads, 3, d].
torch::Tensor head_part(const torch::Tensor& qkv5, int64_t b, int64_t h, int64_t part) {
  return qkv5.select(0, b).select(1, h).select(1, part);
}

// probs = softmax(mask(scale * q k^T)) in place: masked entries become exactly 0.
void head_probabilities(torch::Tensor& probs, const torch::Tensor& q, const torch::Tensor& k, double scale,
                        const torch::Tensor& mask) {
  at::addmm_out(probs, probs, q, k.t(), /*beta=*/0, /*alpha=*/scale);
  probs.masked_fill_(mask, -std::numeric_limits<double>::infinity());
  at::_softmax_out(probs, probs, -1, false);
}

class CausalAttention : public torch::autograd::Function<CausalAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv, int64_t heads) {
    const int64_t batch = qkv.size(0), s = qkv.size(1), d = qkv.size(2) / (3 * heads);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    auto qkv5 = qkv.contiguous().view({batch, s, heads, 3, d});
    auto mask = torch::ones({s, s}, qkv.options().dtype(torch::kBool)).triu(1);
    auto probs = torch::empty({batch, heads, s, s}, qkv.options());
    auto context = torch::empty({batch, s, heads, d}, qkv.options());
    parallel_over_blas_threads(batch * heads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / heads, h = i % heads;
        auto p = probs.select(0, b).select(0, h);
        head_probabilities(p, head_part(qkv5, b, h, 0), head_part(qkv5, b, h, 1), scale, mask);
        auto out = context.select(0, b).select(1, h);
        at::mm_out(out, p, head_part(qkv5, b, h, 2));
      }
    });
    ctx->save_for_backward({qkv5, probs});
    ctx->saved_data["scale"] = scale;
    return context.view({batch, s, heads * d});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& qkv5 = saved[0];
    const auto& probs = saved[1];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t batch = qkv5.size(0), s = qkv5.size(1), heads = qkv5.size(2), d = qkv5.size(4);
    auto grad_context = grads[0].contiguous().view({batch, s, heads, d});
    auto grad_qkv5 = torch::empty_like(qkv5);
    parallel_over_blas_threads(batch * heads, [&](int64_t begin, int64_t end) {
      auto grad_probs = torch::empty({s, s}, probs.options());
      auto grad_scores = torch::empty({s, s}, probs.options());
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / heads, h = i % heads;
        const auto p = probs.select(0, b).select(0, h);
        const auto grad_out = grad_context.select(0, b).select(1, h);
        const auto q = head_part(qkv5, b, h, 0), k = head_part(qkv5, b, h, 1), v = head_part(qkv5, b, h, 2);
        auto grad_q = head_part(grad_qkv5, b, h, 0), grad_k = head_part(grad_qkv5, b, h, 1),
             grad_v = head_part(grad_qkv5, b, h, 2);
        at::mm_out(grad_v, p.t(), grad_out);
        at::mm_out(grad_probs, grad_out, v.t());
        // Masked entries have probability 0, so their score gradients are 0 too.
        at::_softmax_backward_data_out(grad_scores, grad_probs, p, -1, p.scalar_type());
        at::addmm_out(grad_q, grad_q, grad_scores, k, /*beta=*/0, /*alpha=*/scale);
        at::addmm_out(grad_k, grad_k, grad_scores.t(), q, /*beta=*/0, /*alpha=*/scale);
      }
    });
    return {grad_qkv5.view({batch, s, heads * 3 * d}), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& qkv, int64_t heads) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % (3 * heads) == 0, "causal_attention: qkv must be [B, S, heads * 3 * d]");
  return CausalAttention::apply(qkv, heads);
}

}  // namespace loom::models
