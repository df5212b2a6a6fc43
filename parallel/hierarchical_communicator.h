// A group's collectives in two levels (parallel.dp_collectives: hierarchical), as the background
// pages teach for data parallelism across nodes: the link between nodes is several times slower
// than the one inside, so each collective does its bulk inside the node and sends only one share
// per rank over the slow link.
//
//   all_reduce     = reduce-scatter inside the node, all-reduce of this rank's share across
//                    nodes, all-gather inside the node: a rank sends 2(N-1)/N of S/L over the slow
//                    link, where a flat ring sends up to 2(P-1)/P of S (S bytes, N nodes, L ranks
//                    of the group per node, P = N L);
//   reduce_scatter = reduce-scatter inside the node of the chunks grouped by their owners' place
//                    in their node, then reduce-scatter across nodes ((N-1)/N of S/L over the link);
//   all_gather     = the same two steps in reverse.
// Every other op goes through the flat group. The three inner communicators count nothing: this
// one counts each call once, with the bytes the two levels send to their next ranks, so the
// traffic report's intra- and inter-node split is what the wire carried. The steps after a call's
// first run as parallel/later_steps.h says: over Gloo on a thread of their own, as soon as the
// first is done, on communicators of their own over the same ranks.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/later_steps.h"

namespace loom::parallel {

// Where each member of a group sits: NODE_OF_RANK by global rank. The group's nodes in order of
// their first member, the members of a node in group order.
struct GroupLevels {
  std::vector<std::vector<int>> nodes;  // positions in the group, per node
  // Whether every node holds the same number of the group's members (what two levels need).
  bool even() const;
  // The positions of the members at place LOCAL of each node (an inter-node group), in node order.
  std::vector<int> at_place(size_t local) const;
};
GroupLevels group_levels(const std::vector<int64_t>& group, const std::vector<int64_t>& node_of_rank);

class HierarchicalCommunicator : public Communicator {
 public:
  // FLAT: the whole group; INTRA: its members on this rank's node, in group order; INTER: the
  // members at this rank's place in every node, in node order. LEVELS: the group's levels.
  // INTRA_LATER and INTER_LATER, second communicators over INTRA's and INTER's ranks: given, the
  // later steps run on them on a thread of their own (Gloo); null, on INTRA and INTER when the
  // caller waits (NCCL).
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> intra,
                           std::unique_ptr<Communicator> inter, const GroupLevels& levels,
                           std::shared_ptr<CommStats> stats, std::unique_ptr<Communicator> intra_later = nullptr,
                           std::unique_ptr<Communicator> inter_later = nullptr);
  std::string backend() const override { return flat_->backend() + " (hierarchical)"; }

 protected:
  std::vector<std::pair<int64_t, int64_t>> all_reduce_sends(const torch::Tensor& tensor) const override;
  std::vector<std::pair<int64_t, int64_t>> reduce_scatter_sends(const torch::Tensor& output) const override;
  std::vector<std::pair<int64_t, int64_t>> all_gather_sends(const torch::Tensor& input) const override;

  std::unique_ptr<PendingOp> do_all_reduce(torch::Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<PendingOp> do_all_gather(torch::Tensor& output, torch::Tensor& input) override;
  std::unique_ptr<PendingOp> do_reduce_scatter(torch::Tensor& output, torch::Tensor& input, ReduceOp op) override;
  std::unique_ptr<PendingOp> do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                           std::vector<int64_t>& output_splits,
                                           std::vector<int64_t>& input_splits) override;
  std::unique_ptr<PendingOp> do_broadcast(torch::Tensor& tensor, int root) override;
  std::unique_ptr<PendingOp> do_send_recv(std::vector<P2POp>& ops) override;
  std::unique_ptr<PendingOp> do_barrier() override;

 private:
  bool flat_for(const torch::Tensor& tensor) const;
  // A ring step of an inner group: BYTES to its next rank (nothing for a group of one).
  static void add_ring_send(std::vector<std::pair<int64_t, int64_t>>& sends, const Communicator& level, int64_t bytes);

  Communicator& intra_later() { return intra_later_ ? *intra_later_ : *intra_; }
  Communicator& inter_later() { return inter_later_ ? *inter_later_ : *inter_; }

  std::unique_ptr<Communicator> flat_, intra_, inter_, intra_later_, inter_later_;
  // Chunk of the group at each (place, node), place-major: the order the two-level
  // reduce-scatter reads the chunks in and the two-level all-gather writes them back from.
  torch::Tensor place_major_;
  std::unique_ptr<LaterSteps> later_;  // last: its thread stops before the groups it uses go
};

}  // namespace loom::parallel
