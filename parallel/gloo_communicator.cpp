#include "parallel/gloo_communicator.h"

#include <cstdlib>

#include "parallel/ring_all_reduce_scope.h"

namespace loom::parallel {
namespace {

// Waits for c10d works, then runs a local epilogue (copy-out, reduction).
class GlooPending : public PendingOp {
 public:
  GlooPending(std::vector<c10d_compat::WorkPtr> works, std::function<void()> epilogue = {})
      : works_(std::move(works)), epilogue_(std::move(epilogue)) {}
  void wait(std::chrono::milliseconds timeout) override {
    for (auto& work : works_) work->wait(timeout);
    if (epilogue_) epilogue_();
  }
  bool ready() const override {
    for (const auto& work : works_)
      if (!work->isCompleted()) return false;
    return true;
  }

 private:
  std::vector<c10d_compat::WorkPtr> works_;
  std::function<void()> epilogue_;
};

std::unique_ptr<PendingOp> pending(c10d_compat::WorkPtr work, std::function<void()> epilogue = {}) {
  std::vector<c10d_compat::WorkPtr> works{std::move(work)};
  return std::make_unique<GlooPending>(std::move(works), std::move(epilogue));
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return c10d::ReduceOp::MAX;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
    case ReduceOp::sum: break;
  }
  return c10d::ReduceOp::SUM;
}

// bf16 through Gloo: operations that only move bytes see a bf16 tensor as fp16 of
// the same bits; reductions widen it to fp32 and round the result back once (the
// wire then carries fp32), rather than rounding every partial sum to bf16.
torch::Tensor as_wire(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kHalf) : t;
}

bool needs_widening(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16;
}

// ROWS ([P, n]: one row per rank, in rank order) reduced to n values; bf16 in fp32, rounded once
// by the caller's copy. Every rank holds the same rows, so every rank gets the same bits.
torch::Tensor reduce_rows(const torch::Tensor& rows, ReduceOp op) {
  auto wide = needs_widening(rows) ? rows.to(torch::kFloat) : rows;
  switch (op) {
    case ReduceOp::max: return std::get<0>(wide.max(0));
    case ReduceOp::min: return std::get<0>(wide.min(0));
    case ReduceOp::sum: break;
  }
  return wide.sum(0);
}

// Small all-reduces and all-gathers are one all-to-all of the whole tensor to every peer (and, for
// an all-reduce, a local reduction: a "one-shot" all-reduce), not Gloo's ring. The ring sends each
// chunk with its own notifications, 2(P-1) rounds of them, so a small all-reduce costs its latency
// alone: 2.4-3.2 ms from 1 KiB to 256 KiB at two ranks of a 2-core machine and 6.9-7.3 ms at four,
// against 0.8-1.6 and 2.5-3.7 ms for the one exchange (bench/README.md, "Small all-reduces over
// Gloo"). The exchange sends each rank P-1 copies of the tensor where the ring sends 2(P-1)/P of
// it (the same at two ranks; an all-gather sends the same either way), so it is taken while a
// rank's bytes sent stay within this bound: where they cost little beside the latency saved, on
// a slow link too. The traffic counters keep the ring's bytes: they model NCCL's collectives.
constexpr int64_t kOneShotSentBytes = 256 * 1024;

bool takes_one_shot(int64_t ranks, const torch::Tensor& t) {
  return t.numel() > 0 && !RingAllReduceScope::active() &&
         (ranks - 1) * t.numel() * static_cast<int64_t>(t.element_size()) <= kOneShotSentBytes;
}

// The one-shot's exchange: INPUT to every rank of GROUP in one all-to-all, every rank's landing in
// RECEIVED (RANKS x INPUT's elements) in rank order, bounded by TIMEOUT. Returns the work and the
// copy it sends, which must live until the work completes.
std::pair<c10d_compat::WorkPtr, torch::Tensor> send_to_every_rank(c10d_compat::GlooGroup& group, int64_t ranks,
                                                                  const torch::Tensor& input,
                                                                  const torch::Tensor& received,
                                                                  std::chrono::milliseconds timeout) {
  const int64_t n = input.numel();
  auto sent = input.reshape({1, n}).expand({ranks, n}).contiguous();
  auto wire_sent = as_wire(sent).view({-1});
  auto wire_received = as_wire(received).view({-1});
  std::vector<int64_t> splits(static_cast<size_t>(ranks), n);
  c10d::AllToAllOptions options;
  options.timeout = timeout;
  return {group.alltoall_base(wire_received, wire_sent, splits, splits, options), sent};
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::string name, std::vector<int64_t> ranks, int rank,
                                   std::shared_ptr<CommStats> stats, std::chrono::milliseconds timeout,
                                   const c10d_compat::StorePtr& store, const c10d_compat::GlooDevice& device)
    : Communicator(std::move(name), std::move(ranks), rank, std::move(stats), timeout) {
  group_ = c10d_compat::make_gloo_group(store, rank, size(), device, timeout);
}

std::unique_ptr<PendingOp> GlooCommunicator::do_all_reduce(torch::Tensor& tensor, ReduceOp op) {
  if (takes_one_shot(size(), tensor)) {
    auto received = torch::empty({size(), tensor.numel()}, tensor.options());
    auto exchange = send_to_every_rank(*group_, size(), tensor, received, issue_timeout());
    return pending(exchange.first, [tensor, sent = exchange.second, received, op]() mutable {
      tensor.copy_(reduce_rows(received, op).view(tensor.sizes()));
    });
  }
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op);
  options.timeout = issue_timeout();
  if (needs_widening(tensor)) {
    std::vector<at::Tensor> wide{tensor.to(torch::kFloat)};
    auto work = group_->allreduce(wide, options);
    return pending(work, [tensor, wide]() mutable { tensor.copy_(wide[0]); });
  }
  std::vector<at::Tensor> tensors{tensor};
  return pending(group_->allreduce(tensors, options));
}

std::unique_ptr<PendingOp> GlooCommunicator::do_all_gather(torch::Tensor& output, torch::Tensor& input) {
  if (takes_one_shot(size(), input)) {
    // Small: each rank's part lands in place, in rank order; Gloo's ring all-gather costs P-1
    // rounds of latency (the same bytes either way).
    auto exchange = send_to_every_rank(*group_, size(), input, output, issue_timeout());
    return pending(exchange.first, [sent = exchange.second] {});
  }
  // Gloo has no flat all-gather; it fills one output per rank, here views into OUTPUT.
  std::vector<std::vector<at::Tensor>> outputs(1);
  auto flat = as_wire(output).view({size(), -1});
  for (int r = 0; r < size(); ++r) outputs[0].push_back(flat[r].view(input.sizes()));
  std::vector<at::Tensor> inputs{as_wire(input)};
  return pending(group_->allgather(outputs, inputs));
}

std::unique_ptr<PendingOp> GlooCommunicator::do_reduce_scatter(torch::Tensor& output, torch::Tensor& input,
                                                               ReduceOp op) {
  // Gloo in LibTorch has no reduce_scatter. An all-to-all sends every rank its
  // chunk from every peer (the same bytes as a ring reduce-scatter), then each
  // rank reduces the chunks it received in rank order.
  auto received = torch::empty({input.numel()}, input.options());
  auto wire_received = as_wire(received);
  auto flat_input = as_wire(input).view({-1});
  std::vector<int64_t> splits(static_cast<size_t>(size()), output.numel());
  auto work = group_->alltoall_base(wire_received, flat_input, splits, splits);
  return pending(work, [received, output, op, n = size()]() mutable {
    output.view({-1}).copy_(reduce_rows(received.view({n, -1}), op));
  });
}

std::unique_ptr<PendingOp> GlooCommunicator::do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits) {
  auto wire_output = as_wire(output), wire_input = as_wire(input);
  return pending(group_->alltoall_base(wire_output, wire_input, output_splits, input_splits));
}

std::unique_ptr<PendingOp> GlooCommunicator::do_broadcast(torch::Tensor& tensor, int root) {
  std::vector<at::Tensor> tensors{as_wire(tensor)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = issue_timeout();
  return pending(group_->broadcast(tensors, options));
}

std::unique_ptr<PendingOp> GlooCommunicator::do_send_recv(std::vector<P2POp>& ops) {
  // Gloo sends do not wait for the receiver and receives are posted at once,
  // so issuing all of them before waiting on any cannot deadlock; messages
  // between one pair match by tag, and in order within a tag.
  std::vector<c10d_compat::WorkPtr> works;
  for (auto& op : ops) {
    std::vector<at::Tensor> tensors{as_wire(op.tensor)};
    works.push_back(op.kind == P2POp::send ? group_->send(tensors, op.peer, op.tag)
                                           : group_->recv(tensors, op.peer, op.tag));
  }
  return std::make_unique<GlooPending>(std::move(works));
}

std::unique_ptr<PendingOp> GlooCommunicator::do_barrier() {
  c10d::BarrierOptions options;
  options.timeout = issue_timeout();
  return pending(group_->barrier(options));
}

c10d_compat::GlooDevice make_gloo_device(bool single_host) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    return c10d_compat::GlooGroup::createDeviceForInterface(ifname);
  }
  if (single_host) return c10d_compat::GlooGroup::createDeviceForHostname("127.0.0.1");
  return c10d_compat::GlooGroup::createDefaultDevice();
}

CommunicatorFactory make_gloo_factory(const c10d_compat::StorePtr& store, bool single_host,
                                      std::shared_ptr<CommStats> stats, std::chrono::milliseconds timeout) {
  if (!store) return {};
  auto device = make_gloo_device(single_host);
  return [device, store, stats, timeout](const std::string& name, const std::string& key,
                                         const std::vector<int64_t>& ranks, int rank_in_group) {
    return std::make_unique<GlooCommunicator>(name, ranks, rank_in_group, stats, timeout,
                                              c10d_compat::prefix_store("pg/" + key + "/", store), device);
  };
}

}  // namespace loom::parallel
