// Communicator over LibTorch's c10d Gloo backend: CPU tensors, any launcher.
#pragma once

#include "parallel/c10d_compat.h"
#include "parallel/communicator.h"
#include "parallel/process_groups.h"

namespace loom::parallel {

class GlooCommunicator : public Communicator {
 public:
  // STORE must already be prefixed uniquely for this group.
  GlooCommunicator(std::string name, std::vector<int64_t> ranks, int rank, std::shared_ptr<CommStats> stats,
                   std::chrono::milliseconds timeout, const c10d_compat::StorePtr& store,
                   const c10d_compat::GlooDevice& device);
  std::string backend() const override { return "gloo"; }

 protected:
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
  c10::intrusive_ptr<c10d_compat::GlooGroup> group_;
};

// The Gloo transport device: GLOO_SOCKET_IFNAME when set, loopback when every
// rank runs on this host, otherwise the address this host's name resolves to.
c10d_compat::GlooDevice make_gloo_device(bool single_host);

// Makes the Gloo communicator of each group: one transport device for the
// process, one store prefix per group. Null (world of one) when STORE is null.
CommunicatorFactory make_gloo_factory(const c10d_compat::StorePtr& store, bool single_host,
                                      std::shared_ptr<CommStats> stats, std::chrono::milliseconds timeout);

}  // namespace loom::parallel
