#include "parallel/tp_regions.h"

#include <cstdint>

namespace loom::parallel {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, Communicator& comm) {
  auto input = x.contiguous();
  std::vector<int64_t> shape{comm.size()};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  auto stacked = torch::empty(shape, input.options());
  comm.all_gather(stacked, input).wait();
  return torch::cat(stacked.unbind(0), dim);
}

torch::Tensor reduce_scatter_along(const torch::Tensor& x, int64_t dim, Communicator& comm) {
  auto stacked = torch::stack(x.chunk(comm.size(), dim), 0).contiguous();
  auto output = torch::empty(stacked.sizes().slice(1), x.options());
  comm.reduce_scatter(output, stacked).wait();
  return output;
}

torch::Tensor slice_along(const torch::Tensor& x, int64_t dim, const Communicator& comm) {
  TORCH_CHECK(x.size(dim) % comm.size() == 0, "dimension ", dim, " of size ", x.size(dim), " does not split into ",
              comm.size(), " tensor-parallel parts");
  return x.chunk(comm.size(), dim)[comm.rank()].contiguous();
}

namespace {

// The communicator travels through the autograd context as an address: the
// context only stores IValues, and the group outlives every graph built on it.
void save_comm(AutogradContext* ctx, Communicator& comm) {
  ctx->saved_data["comm"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(&comm));
}

Communicator& saved_comm(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["comm"].toInt()));
}

enum class Op { identity, all_reduce, keep_last, gather_last, keep_seq, gather_seq, reduce_scatter_seq };

torch::Tensor apply(Op op, const torch::Tensor& x, Communicator& comm) {
  switch (op) {
    case Op::identity: return x;
    case Op::all_reduce: {
      auto y = x.contiguous().clone();
      comm.all_reduce(y).wait();
      return y;
    }
    case Op::keep_last: return slice_along(x, x.dim() - 1, comm);
    case Op::gather_last: return all_gather_along(x, x.dim() - 1, comm);
    case Op::keep_seq: return slice_along(x, 1, comm);
    case Op::gather_seq: return all_gather_along(x, 1, comm);
    case Op::reduce_scatter_seq: return reduce_scatter_along(x, 1, comm);
  }
  return x;
}

// One autograd function for every boundary: FORWARD on the way in, BACKWARD on the gradient.
template <Op Forward, Op Backward>
struct RegionBoundary : torch::autograd::Function<RegionBoundary<Forward, Backward>> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* comm) {
    save_comm(ctx, *comm);
    return apply(Forward, x, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {apply(Backward, grads[0], saved_comm(ctx)), torch::Tensor()};
  }
};

template <Op Forward, Op Backward>
torch::Tensor cross(const torch::Tensor& x, Communicator& comm) {
  if (comm.size() == 1) return x;
  return RegionBoundary<Forward, Backward>::apply(x, &comm);
}

}  // namespace

torch::Tensor copy_to_tp_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::identity, Op::all_reduce>(x, tp);
}
torch::Tensor reduce_from_tp_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::all_reduce, Op::identity>(x, tp);
}
torch::Tensor scatter_to_tp_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::keep_last, Op::gather_last>(x, tp);
}
torch::Tensor gather_from_tp_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::gather_last, Op::keep_last>(x, tp);
}
torch::Tensor scatter_to_sequence_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::keep_seq, Op::gather_seq>(x, tp);
}
torch::Tensor gather_from_sequence_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::gather_seq, Op::reduce_scatter_seq>(x, tp);
}
torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::reduce_scatter_seq, Op::gather_seq>(x, tp);
}
torch::Tensor gather_sequence_to_replicated_region(const torch::Tensor& x, Communicator& tp) {
  return cross<Op::gather_seq, Op::keep_seq>(x, tp);
}

}  // namespace loom::parallel
