#include "parallel/all_to_all_attention.h"

#include <limits>

#include "parallel/ring_attention.h"

namespace loom::parallel {
namespace {

// x [cp, ...] in equal parts along dim 0: part p goes to rank p, and part p of the
// result came from rank p. Its adjoint is itself, so backward is the same exchange.
torch::Tensor exchange(const torch::Tensor& x, Communicator& cp) {
  auto input = x.contiguous();
  auto output = torch::empty_like(input);
  const int64_t rows = input.size(0) / cp.size();
  std::vector<int64_t> splits(static_cast<size_t>(cp.size()), rows);
  cp.all_to_all(output, input, splits, splits).wait();
  return output;
}

class ExchangeFunction : public torch::autograd::Function<ExchangeFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, Communicator* cp) {
    ctx->saved_data["cp"] = reinterpret_cast<int64_t>(cp);
    return exchange(x, *cp);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* cp = reinterpret_cast<Communicator*>(ctx->saved_data["cp"].toInt());
    return {exchange(grads[0], *cp), torch::Tensor()};
  }
};

// [B, H, L, d] of this rank's tokens -> [B, H / cp, cp L, d]: heads of this rank's share, every
// rank's tokens in rank order.
torch::Tensor sequence_to_heads(const torch::Tensor& x, Communicator& cp) {
  const int64_t n = cp.size(), b = x.size(0), h = x.size(1), l = x.size(2), d = x.size(3);
  auto parts = x.view({b, n, h / n, l, d}).transpose(0, 1);  // [cp (destination), B, H/cp, L, d]
  auto received = ExchangeFunction::apply(parts, &cp);       // [cp (source), B, H/cp, L, d]
  return received.permute({1, 2, 0, 3, 4}).reshape({b, h / n, n * l, d});
}

// The inverse of sequence_to_heads.
torch::Tensor heads_to_sequence(const torch::Tensor& x, Communicator& cp) {
  const int64_t n = cp.size(), b = x.size(0), hn = x.size(1), l = x.size(2) / n, d = x.size(3);
  auto parts = x.view({b, hn, n, l, d}).permute({2, 0, 1, 3, 4});  // [cp (destination), B, H/cp, L, d]
  auto received = ExchangeFunction::apply(parts, &cp);             // [cp (source: head share), B, H/cp, L, d]
  return received.transpose(0, 1).reshape({b, n * hn, l, d});
}

}  // namespace

torch::Tensor all_to_all_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   Communicator& cp, double scale, const AttentionDropout& dropout) {
  const int64_t n = cp.size();
  TORCH_CHECK(q.size(1) % n == 0 && k.size(1) % n == 0, "all-to-all attention: ", q.size(1), " heads and ", k.size(1),
              " kv heads per rank must be divisible by cp = ", n);
  auto qh = sequence_to_heads(q, cp), kh = sequence_to_heads(k, cp), vh = sequence_to_heads(v, cp);
  const int64_t group = qh.size(1) / kh.size(1);
  if (group > 1) {
    kh = kh.repeat_interleave(group, 1);
    vh = vh.repeat_interleave(group, 1);
  }
  // The gathered tokens are in rank order, each rank's two chunks: the mask comes from their global positions.
  const int64_t seq = qh.size(2);
  std::vector<int64_t> order;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t p : context_parallel_positions(seq, n, r)) order.push_back(p);
  }
  auto positions = torch::tensor(order, torch::TensorOptions().dtype(torch::kInt64).device(q.device()));
  if (!dropout.active()) {
    // LibTorch's fused attention (on CPU its flash kernel: no S x S scores) with the tokens put in
    // order, and the context put back in the gathered order: gathered token i is at positions[i].
    auto in_order = torch::argsort(positions);
    auto context = at::scaled_dot_product_attention(qh.index_select(2, in_order), kh.index_select(2, in_order),
                                                    vh.index_select(2, in_order), {}, 0.0, /*is_causal=*/true, scale);
    return heads_to_sequence(context.index_select(2, positions), cp);
  }
  auto masked = positions.unsqueeze(0) > positions.unsqueeze(1);  // key later than query
  auto scores = torch::matmul(qh, kh.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(masked, -std::numeric_limits<double>::infinity());
  // Dropout by the probabilities' global coordinates: this rank holds query heads cp_rank * H/cp ..
  // of the tp rank's.
  AttentionDropout share = dropout;
  share.first_head += cp.rank() * qh.size(1);
  auto probs = keyed_dropout(torch::softmax(scores, -1), share.p, share.key,
                             attention_coordinates(share, qh.size(0), qh.size(1), positions, positions));
  auto context = torch::matmul(probs, vh);
  return heads_to_sequence(context, cp);
}

}  // namespace loom::parallel
