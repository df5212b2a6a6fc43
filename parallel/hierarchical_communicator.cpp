#include "parallel/hierarchical_communicator.h"

#include <algorithm>
#include <map>

#include "parallel/chained_op.h"

namespace loom::parallel {
namespace {

int64_t nbytes(const torch::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

}  // namespace

bool GroupLevels::even() const {
  return std::all_of(nodes.begin(), nodes.end(), [&](const auto& n) { return n.size() == nodes.front().size(); });
}

std::vector<int> GroupLevels::at_place(size_t local) const {
  std::vector<int> out;
  for (const auto& n : nodes) out.push_back(n.at(local));
  return out;
}

GroupLevels group_levels(const std::vector<int64_t>& group, const std::vector<int64_t>& node_of_rank) {
  GroupLevels levels;
  std::map<int64_t, size_t> index_of_node;
  for (size_t position = 0; position < group.size(); ++position) {
    const int64_t node = node_of_rank.at(static_cast<size_t>(group[position]));
    auto [it, added] = index_of_node.emplace(node, levels.nodes.size());
    if (added) levels.nodes.emplace_back();
    levels.nodes[it->second].push_back(static_cast<int>(position));
  }
  return levels;
}

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> flat,
                                                   std::unique_ptr<Communicator> intra,
                                                   std::unique_ptr<Communicator> inter, const GroupLevels& levels,
                                                   std::shared_ptr<CommStats> stats,
                                                   std::unique_ptr<Communicator> intra_later,
                                                   std::unique_ptr<Communicator> inter_later)
    : Communicator(flat->name(), flat->ranks(), flat->rank(), std::move(stats), flat->timeout()),
      flat_(std::move(flat)),
      intra_(std::move(intra)),
      inter_(std::move(inter)),
      intra_later_(std::move(intra_later)),
      inter_later_(std::move(inter_later)),
      later_(intra_later_ ? LaterSteps::on_thread() : LaterSteps::when_waited()) {
  TORCH_CHECK(levels.even() && intra_->size() * inter_->size() == size(),
              "two levels need every node to hold the same number of the group's ranks");
  TORCH_CHECK(!intra_later_ == !inter_later_, "the later steps need communicators of both levels, or of neither");
  for (auto* level : {flat_.get(), intra_.get(), inter_.get(), intra_later_.get(), inter_later_.get()})
    if (level) level->stop_counting();
  std::vector<int64_t> order;
  for (int64_t place = 0; place < intra_->size(); ++place)
    for (const int position : levels.at_place(static_cast<size_t>(place))) order.push_back(position);
  place_major_ = torch::tensor(order, torch::kLong);
}

void HierarchicalCommunicator::add_ring_send(std::vector<std::pair<int64_t, int64_t>>& sends, const Communicator& level,
                                             int64_t bytes) {
  if (level.size() < 2 || bytes == 0) return;
  sends.emplace_back(level.ranks()[static_cast<size_t>((level.rank() + 1) % level.size())], bytes);
}

// The same bytes the inner communicators' rings send (parallel/communicator.cpp's formulas on the
// tensors do_* hands them), each to its level's next rank.
// NCCL carries a CPU tensor (a step's loss, a norm) through a GPU copy for all-reduce but not for
// reduce-scatter: such tensors take the flat ring, as they would without two levels.
bool HierarchicalCommunicator::flat_for(const torch::Tensor& tensor) const {
  return !tensor.is_cuda() && flat_->backend() == "nccl";
}

std::vector<std::pair<int64_t, int64_t>> HierarchicalCommunicator::all_reduce_sends(const torch::Tensor& tensor) const {
  if (flat_for(tensor)) return Communicator::all_reduce_sends(tensor);
  const int64_t local = intra_->size(), nodes = inter_->size();
  const int64_t share = (tensor.numel() + local - 1) / local * static_cast<int64_t>(tensor.element_size());
  std::vector<std::pair<int64_t, int64_t>> sends;
  add_ring_send(sends, *intra_, 2 * (local - 1) * share);  // the reduce-scatter and the all-gather
  add_ring_send(sends, *inter_, 2 * (nodes - 1) * share / nodes);
  return sends;
}

std::vector<std::pair<int64_t, int64_t>> HierarchicalCommunicator::reduce_scatter_sends(
    const torch::Tensor& output) const {
  const int64_t local = intra_->size(), nodes = inter_->size();
  std::vector<std::pair<int64_t, int64_t>> sends;
  add_ring_send(sends, *intra_, (local - 1) * nodes * nbytes(output));
  add_ring_send(sends, *inter_, (nodes - 1) * nbytes(output));
  return sends;
}

std::vector<std::pair<int64_t, int64_t>> HierarchicalCommunicator::all_gather_sends(const torch::Tensor& input) const {
  const int64_t local = intra_->size(), nodes = inter_->size();
  std::vector<std::pair<int64_t, int64_t>> sends;
  add_ring_send(sends, *inter_, (nodes - 1) * nbytes(input));
  add_ring_send(sends, *intra_, (local - 1) * nodes * nbytes(input));
  return sends;
}

std::unique_ptr<PendingOp> HierarchicalCommunicator::do_all_reduce(torch::Tensor& tensor, ReduceOp op) {
  if (flat_for(tensor)) return pending_inner(flat_->all_reduce(tensor, op));
  if (intra_->size() == 1) return pending_inner(inter_->all_reduce(tensor, op));  // one rank per node: the ring across
  return all_reduce_in_two_steps(*intra_, intra_later(), inter_later(), *later_, tensor, op);
}

std::unique_ptr<PendingOp> HierarchicalCommunicator::do_reduce_scatter(torch::Tensor& output, torch::Tensor& input,
                                                                       ReduceOp op) {
  const int64_t chunk = output.numel(), nodes = inter_->size();
  // The chunks in place-major order: the node's reduce-scatter hands place j the chunks of every
  // node's place-j rank, in node order, which the reduce-scatter across nodes then deals out.
  auto by_place = input.view({size(), chunk}).index_select(0, place_major_.to(input.device()));
  auto across = torch::empty({nodes * chunk}, output.options());
  auto first = intra_->reduce_scatter(across, by_place.view({-1}), op);
  return later_->after(std::move(first),
                       [this, across, output, op] { inter_later().reduce_scatter(output, across, op).wait(); });
}

std::unique_ptr<PendingOp> HierarchicalCommunicator::do_all_gather(torch::Tensor& output, torch::Tensor& input) {
  const int64_t chunk = input.numel(), nodes = inter_->size();
  auto across = torch::empty({nodes * chunk}, input.options());
  auto first = inter_->all_gather(across, input);
  return later_->after(std::move(first), [this, across, output, chunk]() mutable {
    auto by_place = torch::empty({size(), chunk}, across.options());
    intra_later().all_gather(by_place.view({-1}), across).wait();
    output.view({size(), chunk}).index_copy_(0, place_major_.to(output.device()), by_place);
  });
}

std::unique_ptr<PendingOp> HierarchicalCommunicator::do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                                                   std::vector<int64_t>& output_splits,
                                                                   std::vector<int64_t>& input_splits) {
  return pending_inner(flat_->all_to_all(output, input, output_splits, input_splits));
}

std::unique_ptr<PendingOp> HierarchicalCommunicator::do_broadcast(torch::Tensor& tensor, int root) {
  return pending_inner(flat_->broadcast(tensor, root));
}

std::unique_ptr<PendingOp> HierarchicalCommunicator::do_send_recv(std::vector<P2POp>& ops) {
  return pending_inner(flat_->send_recv(ops));
}

std::unique_ptr<PendingOp> HierarchicalCommunicator::do_barrier() {
  return pending_inner(flat_->barrier());
}

}  // namespace loom::parallel
