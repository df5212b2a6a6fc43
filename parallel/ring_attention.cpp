#include "parallel/ring_attention.h"

#include <limits>

#include "parallel/keyed_dropout.h"

namespace loom::parallel {
namespace {

using torch::indexing::Slice;

// The causal mask of a diagonal block: true above the diagonal.
torch::Tensor upper_mask(int64_t n, const torch::Device& device) {
  return torch::ones({n, n}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
}

// Heads of K or V repeated for the query heads that read them.
torch::Tensor expand_kv(const torch::Tensor& kv, int64_t group) {
  return group == 1 ? kv : kv.repeat_interleave(group, 1);
}

// The sum over each kv head's query heads: expand_kv's backward.
torch::Tensor reduce_kv(const torch::Tensor& grad, int64_t group) {
  if (group == 1) return grad;
  auto sizes = grad.sizes().vec();
  return grad.view({sizes[0], sizes[1] / group, group, sizes[2], sizes[3]}).sum(2);
}

// Blocks are computed in fp32 at least (double stays double).
torch::ScalarType compute_dtype(const torch::Tensor& q) {
  return q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// On CPU without dropout a block is LibTorch's flash kernel, which gives the block's log-sum-exp
// beside its output and never holds the block's scores whole; its backward takes the final
// output and log-sum-exp, so it gives the block's share of the gradients directly. Dropout (which
// the kernel does not draw by global coordinates) and GPUs take the products below.
bool flash_block(const torch::Tensor& q, const torch::Tensor& keep) {
  return !keep.defined() && q.is_cpu() && q.scalar_type() == torch::kFloat;
}

struct Partial {
  torch::Tensor out;  // [B, h, L, d]
  torch::Tensor lse;  // [B, h, L]
};

// softmax(q k^T scale (masked)) v with its row log-sum-exp. The block's scores are the largest
// tensor of a ring step: they are worked on in place, one [B, h, Lq, Lk] buffer at a time.
// KEEP (optional): dropout's keep-and-scale of the block's probabilities; the log-sum-exp is
// the undropped one, so partial results merge as without dropout.
Partial attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale, bool diagonal,
               const torch::Tensor& keep) {
  if (flash_block(q, keep)) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, diagonal, {}, scale);
    return {out, lse};
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)).mul_(scale);
  if (diagonal) scores.masked_fill_(upper_mask(q.size(2), q.device()), -std::numeric_limits<double>::infinity());
  auto lse = torch::logsumexp(scores, -1);
  scores.sub_(lse.unsqueeze(-1)).exp_();
  if (keep.defined()) scores.mul_(keep);
  return {torch::matmul(scores, v), lse};
}

// Two partial results over disjoint keys -> the result over both.
void merge(Partial& into, const Partial& more) {
  if (!into.out.defined()) {
    into = more;
    return;
  }
  // In place: the ring's peak memory is a few of these [B, h, L, d] tensors, not a few more.
  auto lse = torch::logaddexp(into.lse, more.lse);
  into.out.mul_(into.lse.sub_(lse).exp_().unsqueeze(-1));
  into.out.addcmul_(more.out, more.lse.sub(lse).exp_().unsqueeze(-1));
  into.lse = lse;
}

// Which blocks rank R computes with the keys and values of rank J (see the header).
enum class Blocks { own, first_key_chunk, later_query_chunk };
Blocks blocks_for(int64_t r, int64_t j) {
  return j == r ? Blocks::own : (j < r ? Blocks::first_key_chunk : Blocks::later_query_chunk);
}

struct BlockGrads {
  torch::Tensor dq, dk, dv;
};

// The gradients of one block of attend() given the final output OUT, its LSE and D = rowsum(dO * O),
// with the probabilities and their gradient in place as in attend().
// With dropout's KEEP: O = (P * KEEP) V, so dV = (P * KEEP)^T dO and dS = P (KEEP dO V^T - D).
BlockGrads attend_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& delta,
                           const torch::Tensor& dout, double scale, bool diagonal, const torch::Tensor& keep) {
  if (flash_block(q, keep)) {
    auto [dq, dk, dv] =
        at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, diagonal, {}, scale);
    return {dq, dk, dv};
  }
  auto p = torch::matmul(q, k.transpose(-2, -1)).mul_(scale);
  if (diagonal) p.masked_fill_(upper_mask(q.size(2), q.device()), -std::numeric_limits<double>::infinity());
  p.sub_(lse.unsqueeze(-1)).exp_();
  auto dv = torch::matmul((keep.defined() ? p * keep : p).transpose(-2, -1), dout);
  auto dp = torch::matmul(dout, v.transpose(-2, -1));
  if (keep.defined()) dp.mul_(keep);
  auto ds = dp.sub_(delta.unsqueeze(-1)).mul_(p).mul_(scale);
  p = torch::Tensor();  // freed before the last two products
  return {torch::matmul(ds, k), torch::matmul(ds.transpose(-2, -1), q), dv};
}

// The ring's neighbours: keys and values go to the next rank and come from the previous.
struct Ring {
  Communicator& cp;
  int next, prev;
  explicit Ring(Communicator& c)
      : cp(c),
        next(static_cast<int>((c.rank() + 1) % c.size())),
        prev(static_cast<int>((c.rank() + c.size() - 1) % c.size())) {}
  // Sends SEND on and receives into RECV, tagged by STEP and KIND, without waiting.
  CommHandle shift(const torch::Tensor& send, const torch::Tensor& recv, int64_t step, int kind) {
    const int tag = static_cast<int>(step * 4 + kind);
    return cp.send_recv({{P2POp::send, send, next, tag}, {P2POp::recv, recv, prev, tag}});
  }
  // The keys and values of the next step on their way (none after the last of N steps).
  struct InFlight {
    torch::Tensor incoming;
    CommHandle transfer;
    bool defined() const { return incoming.defined(); }
  };
  InFlight pass_on(const torch::Tensor& kv, int64_t step, int64_t n, int kind) {
    InFlight f;
    if (step + 1 < n) {
      f.incoming = torch::empty_like(kv);
      f.transfer = shift(kv, f.incoming, step, kind);
    }
    return f;
  }
  torch::Tensor arrived(InFlight f) {
    f.transfer.wait();
    return f.incoming;
  }
};

// The keys and values a rank holds on one ring step: OWNER's, in the compute dtype, repeated for
// the query heads that read them, and their two chunks.
struct Held {
  int64_t owner;
  torch::Tensor k, v, k0, k1, v0, v1;
  Held(const torch::Tensor& kv, int64_t owner_rank, torch::ScalarType dtype, int64_t group)
      : owner(owner_rank), k(expand_kv(kv[0].to(dtype), group)), v(expand_kv(kv[1].to(dtype), group)) {
    const int64_t c = k.size(2) / 2;
    k0 = k.narrow(2, 0, c), k1 = k.narrow(2, c, c), v0 = v.narrow(2, 0, c), v1 = v.narrow(2, c, c);
  }
};

// Dropout's keep-and-scale of a block, from the global positions of its query and key chunks.
struct BlockDropout {
  AttentionDropout dropout;
  int64_t batch, heads, c;
  torch::ScalarType dtype;
  torch::Device device;
  torch::Tensor keep(std::initializer_list<int64_t> query_chunks, std::initializer_list<int64_t> key_chunks) const {
    if (!dropout.active()) return {};
    auto positions = [&](std::initializer_list<int64_t> chunks) {
      std::vector<torch::Tensor> parts;
      for (int64_t chunk : chunks)
        parts.push_back(torch::arange(chunk * c, (chunk + 1) * c, torch::dtype(torch::kInt64).device(device)));
      return torch::cat(parts);
    };
    return attention_keep_scale(dropout, batch, heads, positions(query_chunks), positions(key_chunks), dtype);
  }
};

class RingAttentionFunction : public torch::autograd::Function<RingAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, Communicator* cp, double scale, double dropout_p,
                               int64_t dropout_key, int64_t first_head, int64_t total_heads) {
    const int64_t n = cp->size(), r = cp->rank(), c = q.size(2) / 2, group = q.size(1) / k.size(1);
    Ring ring(*cp);
    // Keys and values travel in their own dtype (bf16 under mixed precision); the blocks and their
    // merge are computed in fp32, whose log-sum-exp and running sums bf16 would round away.
    const auto dtype = compute_dtype(q);
    const BlockDropout drop{
        {dropout_p, dropout_key, first_head, total_heads, 2 * n * c}, q.size(0), q.size(1), c, dtype, q.device()};
    const int64_t later = 2 * n - 1 - r;  // this rank's second query chunk
    auto q32 = q.to(dtype);
    auto q0 = q32.narrow(2, 0, c), q1 = q32.narrow(2, c, c);
    Partial first, second;  // over query chunks r and 2cp-1-r
    auto kv = torch::stack({k, v}).contiguous();
    for (int64_t step = 0; step < n; ++step) {
      auto next = ring.pass_on(kv, step, n, 0);
      const Held held(kv, (r - step + n) % n, dtype, group);
      const auto &kj = held.k, &vj = held.v, &k0 = held.k0, &k1 = held.k1, &v0 = held.v0, &v1 = held.v1;
      const int64_t j = held.owner, j_later = 2 * n - 1 - held.owner;
      switch (blocks_for(r, held.owner)) {
        case Blocks::own:
          merge(first, attend(q0, k0, v0, scale, true, drop.keep({r}, {j})));
          merge(second, attend(q1, k0, v0, scale, false, drop.keep({later}, {j})));
          merge(second, attend(q1, k1, v1, scale, true, drop.keep({later}, {j_later})));
          break;
        case Blocks::first_key_chunk:
          merge(first, attend(q0, k0, v0, scale, false, drop.keep({r}, {j})));
          merge(second, attend(q1, k0, v0, scale, false, drop.keep({later}, {j})));
          break;
        case Blocks::later_query_chunk:
          merge(second, attend(q1, kj, vj, scale, false, drop.keep({later}, {j, j_later})));
          break;
      }
      if (next.defined()) kv = ring.arrived(std::move(next));
    }
    auto out = torch::cat({first.out, second.out}, 2).to(q.scalar_type());
    auto lse = torch::cat({first.lse, second.lse}, 2);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["cp"] = reinterpret_cast<int64_t>(cp);
    ctx->saved_data["dropout_p"] = dropout_p;
    ctx->saved_data["dropout_key"] = dropout_key;
    ctx->saved_data["first_head"] = first_head;
    ctx->saved_data["total_heads"] = total_heads;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    auto* cp = reinterpret_cast<Communicator*>(ctx->saved_data["cp"].toInt());
    const int64_t n = cp->size(), r = cp->rank(), c = q.size(2) / 2, group = q.size(1) / k.size(1);
    Ring ring(*cp);
    // In fp32 as the forward; the gradients of other ranks' keys and values travel in fp32 too.
    const auto dtype = compute_dtype(q);
    const BlockDropout drop{{ctx->saved_data["dropout_p"].toDouble(), ctx->saved_data["dropout_key"].toInt(),
                             ctx->saved_data["first_head"].toInt(), ctx->saved_data["total_heads"].toInt(), 2 * n * c},
                            q.size(0),
                            q.size(1),
                            c,
                            dtype,
                            q.device()};
    const int64_t later = 2 * n - 1 - r;
    auto dout = grads[0].to(dtype).contiguous();
    auto out32 = out.to(dtype);
    auto delta = (dout * out32).sum(-1);  // D = rowsum(dO * O), for blocks computed by the products
    auto q32 = q.to(dtype);
    auto q0 = q32.narrow(2, 0, c), q1 = q32.narrow(2, c, c);
    auto dq = torch::zeros_like(q32);
    auto dq0 = dq.narrow(2, 0, c), dq1 = dq.narrow(2, c, c);
    auto lse0 = lse.narrow(2, 0, c), lse1 = lse.narrow(2, c, c);
    auto delta0 = delta.narrow(2, 0, c), delta1 = delta.narrow(2, c, c);
    auto do0 = dout.narrow(2, 0, c), do1 = dout.narrow(2, c, c);
    auto out0 = out32.narrow(2, 0, c), out1 = out32.narrow(2, c, c);

    auto kv = torch::stack({k, v}).contiguous();
    torch::Tensor own_dkv;  // this rank's gradients of its own keys and values (step 0)
    torch::Tensor dkv;      // the gradients of the keys and values held now, travelling with them
    CommHandle dkv_transfer;
    torch::Tensor dkv_incoming;
    for (int64_t step = 0; step < n; ++step) {
      auto next = ring.pass_on(kv, step, n, 1);
      const Held held(kv, (r - step + n) % n, dtype, group);
      const auto &kj = held.k, &vj = held.v, &k0 = held.k0, &k1 = held.k1, &v0 = held.v0, &v1 = held.v1;
      // The step's key and value gradients side by side, as they travel (no stacked copy without kv groups).
      auto dkv_step = torch::zeros({2, kj.size(0), kj.size(1), kj.size(2), kj.size(3)}, kj.options());
      auto dk = dkv_step[0], dv = dkv_step[1];
      auto dk0 = dk.narrow(2, 0, c), dk1 = dk.narrow(2, c, c), dv0 = dv.narrow(2, 0, c), dv1 = dv.narrow(2, c, c);
      auto add = [](const BlockGrads& g, torch::Tensor& dq_part, torch::Tensor& dk_part, torch::Tensor& dv_part) {
        dq_part.add_(g.dq);
        dk_part.add_(g.dk);
        dv_part.add_(g.dv);
      };
      const int64_t j = held.owner, j_later = 2 * n - 1 - held.owner;
      switch (blocks_for(r, held.owner)) {
        case Blocks::own:
          add(attend_backward(q0, k0, v0, out0, lse0, delta0, do0, scale, true, drop.keep({r}, {j})), dq0, dk0, dv0);
          add(attend_backward(q1, k0, v0, out1, lse1, delta1, do1, scale, false, drop.keep({later}, {j})), dq1, dk0,
              dv0);
          add(attend_backward(q1, k1, v1, out1, lse1, delta1, do1, scale, true, drop.keep({later}, {j_later})), dq1,
              dk1, dv1);
          break;
        case Blocks::first_key_chunk:
          add(attend_backward(q0, k0, v0, out0, lse0, delta0, do0, scale, false, drop.keep({r}, {j})), dq0, dk0, dv0);
          add(attend_backward(q1, k0, v0, out1, lse1, delta1, do1, scale, false, drop.keep({later}, {j})), dq1, dk0,
              dv0);
          break;
        case Blocks::later_query_chunk:
          add(attend_backward(q1, kj, vj, out1, lse1, delta1, do1, scale, false, drop.keep({later}, {j, j_later})), dq1,
              dk, dv);
          break;
      }
      auto mine = group == 1 ? dkv_step : torch::stack({reduce_kv(dk, group), reduce_kv(dv, group)});
      dkv_step = dk = dv = torch::Tensor();
      if (step == 0) {
        own_dkv = mine;
      } else {
        // Rank j's gradients so far arrived from the previous rank (none yet on step 1).
        if (!dkv_transfer.done()) {
          dkv_transfer.wait();
          mine.add_(dkv_incoming);
          dkv_incoming = torch::Tensor();
        }
        // On to the next rank, which holds j's keys and values next step; after the last step that is j itself.
        dkv = mine.contiguous();
        dkv_incoming = torch::empty_like(dkv);
        dkv_transfer = ring.shift(dkv, dkv_incoming, step, 2);
      }
      if (next.defined()) kv = ring.arrived(std::move(next));
    }
    if (!dkv_transfer.done()) {
      dkv_transfer.wait();
      own_dkv.add_(dkv_incoming);  // every other rank's share of this rank's gradients
    }
    return {dq.to(q.scalar_type()),
            own_dkv[0].to(k.scalar_type()),
            own_dkv[1].to(v.scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, Communicator& cp,
                             double scale, const AttentionDropout& dropout) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == v.sizes() && q.size(2) == k.size(2) && q.size(2) % 2 == 0 &&
                  q.size(1) % k.size(1) == 0,
              "ring_attention: q [B, heads, 2c, d] and k, v [B, kv_heads, 2c, d] expected, got ", q.sizes(), " and ",
              k.sizes());
  return RingAttentionFunction::apply(q, k, v, &cp, scale, dropout.p, dropout.key, dropout.first_head,
                                      dropout.total_heads);
}

std::vector<int64_t> context_parallel_positions(int64_t seq_len, int64_t cp, int64_t rank) {
  const int64_t c = seq_len / (2 * cp);
  std::vector<int64_t> positions;
  for (int64_t chunk : {rank, 2 * cp - 1 - rank}) {
    for (int64_t i = 0; i < c; ++i) positions.push_back(chunk * c + i);
  }
  return positions;
}

torch::Tensor context_parallel_slice(const torch::Tensor& x, int64_t cp, int64_t rank) {
  const int64_t c = x.size(1) / (2 * cp);
  return torch::cat({x.narrow(1, rank * c, c), x.narrow(1, (2 * cp - 1 - rank) * c, c)}, 1);
}

}  // namespace loom::parallel
