#include "parallel/nccl_communicator.h"

#include <cstring>
#include <sstream>
#include <thread>

namespace loom::parallel {
namespace {

// Every foreign call is checked where it is made, and says which call failed.
#define LOOM_CUDA_CHECK(call)                                                                 \
  do {                                                                                        \
    cudaError_t status_ = (call);                                                             \
    if (status_ != cudaSuccess) {                                                             \
      throw std::runtime_error(std::string(#call " failed: ") + cudaGetErrorString(status_)); \
    }                                                                                         \
  } while (0)

#define LOOM_NCCL_CHECK(call)                                                                 \
  do {                                                                                        \
    ncclResult_t status_ = (call);                                                            \
    if (status_ != ncclSuccess) {                                                             \
      throw std::runtime_error(std::string(#call " failed: ") + ncclGetErrorString(status_)); \
    }                                                                                         \
  } while (0)

ncclDataType_t nccl_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kFloat16: return ncclFloat16;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kInt32: return ncclInt32;
    case torch::kInt64: return ncclInt64;
    case torch::kUInt8: return ncclUint8;
    case torch::kInt8: return ncclInt8;
    default:
      throw std::runtime_error("NCCL cannot move tensors of type " + std::string(c10::toString(t.scalar_type())));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::sum: break;
  }
  return ncclSum;
}

void check_cuda_tensor(const torch::Tensor& t) {
  if (!t.is_cuda()) throw std::runtime_error("the NCCL communicator moves CUDA tensors only");
}

// Holds the tensors NCCL works on until the default stream has been made to wait
// for it: they come from LibTorch's caching allocator, which would otherwise hand a
// block freed by the caller to the next default-stream kernel while NCCL, on its
// own stream, still reads or writes it.
class NcclPending : public PendingOp {
 public:
  NcclPending(cudaEvent_t done, ncclComm_t comm, std::vector<torch::Tensor> in_use)
      : done_(done), comm_(comm), in_use_(std::move(in_use)) {}
  ~NcclPending() override { cudaEventDestroy(done_); }
  void wait(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      cudaError_t status = cudaEventQuery(done_);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) LOOM_CUDA_CHECK(status);
      ncclResult_t async_error = ncclSuccess;
      LOOM_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
      if (async_error != ncclSuccess) {
        ncclCommAbort(comm_);
        throw std::runtime_error(std::string("NCCL reported ") + ncclGetErrorString(async_error));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        // Aborting frees the stream so the process can report and exit.
        ncclCommAbort(comm_);
        throw std::runtime_error("timed out waiting for NCCL");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // Later work on the default stream sees the result (and may reuse the tensors' memory).
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, done_, 0));
    in_use_.clear();
  }
  bool ready() const override { return cudaEventQuery(done_) == cudaSuccess; }

 private:
  cudaEvent_t done_;
  ncclComm_t comm_;
  std::vector<torch::Tensor> in_use_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::string name, std::vector<int64_t> ranks, int rank,
                                   std::shared_ptr<CommStats> stats, std::chrono::milliseconds timeout,
                                   const c10d_compat::StorePtr& store, int device)
    : Communicator(std::move(name), std::move(ranks), rank, std::move(stats), timeout), device_(device) {
  LOOM_CUDA_CHECK(cudaSetDevice(device_));
  ncclUniqueId id;
  if (rank == 0) {
    LOOM_NCCL_CHECK(ncclGetUniqueId(&id));
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store->set("nccl_id", std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    auto bytes = store->get("nccl_id");
    if (bytes.size() != sizeof(id)) throw std::runtime_error("malformed NCCL id in the store");
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  LOOM_NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, rank));
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  barrier_buffer_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA, device_));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::begin() {
  cudaEvent_t ready;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventRecord(ready, cudaStreamLegacy));
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
  LOOM_CUDA_CHECK(cudaEventDestroy(ready));
}

std::unique_ptr<PendingOp> NcclCommunicator::finish(std::vector<torch::Tensor> in_use) {
  cudaEvent_t done;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventRecord(done, stream_));
  return std::make_unique<NcclPending>(done, comm_, std::move(in_use));
}

// The trainer's few host numbers per step (losses, timings, flags, reports) go
// through a copy on the device, since NCCL moves device memory only; they are
// small, and the call returns once they are back.
torch::Tensor NcclCommunicator::on_device(const torch::Tensor& host) const {
  return host.to(torch::Device(torch::kCUDA, device_));
}

std::unique_ptr<PendingOp> NcclCommunicator::copy_back(std::unique_ptr<PendingOp> pending, torch::Tensor& host,
                                                       const torch::Tensor& device) {
  if (pending) pending->wait(issue_timeout());  // a bounded overload's call waits here
  host.copy_(device);
  return nullptr;
}

std::unique_ptr<PendingOp> NcclCommunicator::do_all_reduce(torch::Tensor& tensor, ReduceOp op) {
  if (tensor.is_cpu()) {
    auto staged = on_device(tensor);
    return copy_back(do_all_reduce(staged, op), tensor, staged);
  }
  check_cuda_tensor(tensor);
  begin();
  LOOM_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                nccl_dtype(tensor), nccl_op(op), comm_, stream_));
  return finish({tensor});
}

std::unique_ptr<PendingOp> NcclCommunicator::do_all_gather(torch::Tensor& output, torch::Tensor& input) {
  if (output.is_cpu() && input.is_cpu()) {
    auto staged_output = on_device(output), staged_input = on_device(input);
    return copy_back(do_all_gather(staged_output, staged_input), output, staged_output);
  }
  check_cuda_tensor(output);
  check_cuda_tensor(input);
  begin();
  LOOM_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                                nccl_dtype(input), comm_, stream_));
  return finish({output, input});
}

std::unique_ptr<PendingOp> NcclCommunicator::do_reduce_scatter(torch::Tensor& output, torch::Tensor& input,
                                                               ReduceOp op) {
  check_cuda_tensor(output);
  check_cuda_tensor(input);
  begin();
  LOOM_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                                    nccl_dtype(input), nccl_op(op), comm_, stream_));
  return finish({output, input});
}

std::unique_ptr<PendingOp> NcclCommunicator::do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits) {
  check_cuda_tensor(output);
  check_cuda_tensor(input);
  const size_t row_in = input.size(0) ? static_cast<size_t>(input.numel() / input.size(0)) : 0;
  const size_t row_out = output.size(0) ? static_cast<size_t>(output.numel() / output.size(0)) : 0;
  const size_t item = input.element_size();
  auto* in = static_cast<char*>(input.data_ptr());
  auto* out = static_cast<char*>(output.data_ptr());
  begin();
  LOOM_NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < size(); ++peer) {
    const size_t send_count = static_cast<size_t>(input_splits[peer]) * row_in;
    const size_t recv_count = static_cast<size_t>(output_splits[peer]) * row_out;
    if (send_count) LOOM_NCCL_CHECK(ncclSend(in, send_count, nccl_dtype(input), peer, comm_, stream_));
    if (recv_count) LOOM_NCCL_CHECK(ncclRecv(out, recv_count, nccl_dtype(output), peer, comm_, stream_));
    in += send_count * item;
    out += recv_count * item;
  }
  LOOM_NCCL_CHECK(ncclGroupEnd());
  return finish({output, input});
}

std::unique_ptr<PendingOp> NcclCommunicator::do_broadcast(torch::Tensor& tensor, int root) {
  if (tensor.is_cpu()) {
    auto staged = on_device(tensor);
    return copy_back(do_broadcast(staged, root), tensor, staged);
  }
  check_cuda_tensor(tensor);
  begin();
  LOOM_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                nccl_dtype(tensor), root, comm_, stream_));
  return finish({tensor});
}

std::unique_ptr<PendingOp> NcclCommunicator::do_send_recv(std::vector<P2POp>& ops) {
  std::vector<torch::Tensor> in_use;
  begin();
  LOOM_NCCL_CHECK(ncclGroupStart());
  for (auto& op : ops) {
    check_cuda_tensor(op.tensor);
    in_use.push_back(op.tensor);
    const auto count = static_cast<size_t>(op.tensor.numel());
    if (op.kind == P2POp::send) {
      LOOM_NCCL_CHECK(ncclSend(op.tensor.data_ptr(), count, nccl_dtype(op.tensor), op.peer, comm_, stream_));
    } else {
      LOOM_NCCL_CHECK(ncclRecv(op.tensor.data_ptr(), count, nccl_dtype(op.tensor), op.peer, comm_, stream_));
    }
  }
  LOOM_NCCL_CHECK(ncclGroupEnd());
  return finish(std::move(in_use));
}

std::unique_ptr<PendingOp> NcclCommunicator::do_barrier() {
  // NCCL has no barrier: a one-element all-reduce that every rank must join is one.
  return do_all_reduce(barrier_buffer_, ReduceOp::sum);
}

CommunicatorFactory make_nccl_factory(const c10d_compat::StorePtr& store, int device, std::shared_ptr<CommStats> stats,
                                      std::chrono::milliseconds timeout) {
  if (!store) return {};
  return [device, store, stats, timeout](const std::string& name, const std::string& key,
                                         const std::vector<int64_t>& ranks, int rank_in_group) {
    return std::make_unique<NcclCommunicator>(name, ranks, rank_in_group, stats, timeout,
                                              c10d_compat::prefix_store("nccl/" + key + "/", store), device);
  };
}

}  // namespace loom::parallel
