#include "parallel/data_parallel.h"

namespace loom::parallel {

GradientReducer::GradientReducer(std::vector<torch::Tensor> params) : params_(std::move(params)) {
  int64_t total = 0;
  for (const auto& p : params_) total += p.numel();
  if (!params_.empty()) flat_ = torch::empty({total}, params_.front().options());
}

void GradientReducer::all_reduce(Communicator& comm, double scale) {
  if (comm.size() == 1 || params_.empty()) return;
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& p : params_) {
    auto slot = flat_.narrow(0, offset, p.numel());
    if (p.grad().defined()) {
      slot.copy_(p.grad().view({-1}));
    } else {
      slot.zero_();
    }
    offset += p.numel();
  }
  comm.all_reduce(flat_).wait();
  if (scale != 1.0) flat_.mul_(scale);
  offset = 0;
  for (auto& p : params_) {
    auto slot = flat_.narrow(0, offset, p.numel()).view(p.sizes());
    if (p.grad().defined()) {
      p.mutable_grad().copy_(slot);
    } else {
      p.mutable_grad() = slot.clone();
    }
    offset += p.numel();
  }
}

void all_reduce_pieces(const std::vector<torch::Tensor>& pieces, Communicator& comm) {
  if (comm.size() == 1 || pieces.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const auto& p : pieces) flat.push_back(p.reshape({-1}));
  auto all = torch::cat(flat);
  comm.all_reduce(all).wait();
  int64_t offset = 0;
  for (const auto& p : pieces) {
    p.copy_(all.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

}  // namespace loom::parallel
