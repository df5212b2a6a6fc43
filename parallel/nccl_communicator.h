// Communicator over NCCL for CUDA tensors: one NCCL communicator per group, its
// unique id passed from the group's rank 0 to the others through the store.
// Work runs on the communicator's own stream, ordered after the work already
// queued on the default stream and before the work queued after wait().
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "parallel/c10d_compat.h"
#include "parallel/communicator.h"
#include "parallel/process_groups.h"

namespace loom::parallel {

class NcclCommunicator : public Communicator {
 public:
  // STORE must already be prefixed uniquely for this group; DEVICE is this rank's CUDA device.
  NcclCommunicator(std::string name, std::vector<int64_t> ranks, int rank, std::shared_ptr<CommStats> stats,
                   std::chrono::milliseconds timeout, const c10d_compat::StorePtr& store, int device);
  ~NcclCommunicator() override;
  std::string backend() const override { return "nccl"; }

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
  // Orders our stream after the default stream's queued work.
  void begin();
  // Records completion and returns the handle's pending op.
  std::unique_ptr<PendingOp> finish(std::vector<torch::Tensor> in_use);  // records the stream's end; holds IN_USE
  // Host tensors are staged: a copy on this rank's device, and the result copied back once PENDING is done.
  torch::Tensor on_device(const torch::Tensor& host) const;
  std::unique_ptr<PendingOp> copy_back(std::unique_ptr<PendingOp> pending, torch::Tensor& host,
                                       const torch::Tensor& device);

  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  torch::Tensor barrier_buffer_;
};

// Makes the NCCL communicators of a job's groups on CUDA device DEVICE (null
// without a store: world 1, where every group has one rank).
CommunicatorFactory make_nccl_factory(const c10d_compat::StorePtr& store, int device, std::shared_ptr<CommStats> stats,
                                      std::chrono::milliseconds timeout);

}  // namespace loom::parallel
