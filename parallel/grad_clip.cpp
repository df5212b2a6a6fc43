#include "parallel/grad_clip.h"

#include <ATen/ATen.h>

#include <cmath>

namespace loom::parallel {
namespace {

// The sum of the squares of TENSORS, in fp64 on OPTIONS' device. On a GPU each tensor's norm comes
// from torch's multi-tensor _foreach_norm (fp32 within a tensor), where a cast, a square, a sum and
// an add per tensor were 3300 kernel launches a step for the MoE benchmark's 818 gradients: 75 ms
// of host time with the GPU idle (H200, bench/gpu/moe_1b.yaml's profile). The CPU, where a launch
// costs nothing, keeps the exact fp64 squares.
torch::Tensor sum_of_squares(const std::vector<torch::Tensor>& tensors, const torch::TensorOptions& options) {
  auto sum = torch::zeros({1}, options);
  if (tensors.empty()) return sum;
  if (options.device().is_cuda())
    return sum + torch::stack(at::_foreach_norm(tensors)).to(torch::kFloat64).pow(2).sum();
  for (const auto& g : tensors) sum += g.to(torch::kFloat64).pow(2).sum();
  return sum;
}

// The global norm from this rank's COUNTED (and EXPERT_COUNTED) gradient
// pieces, summed over the groups in the order every rank uses; GRADS scaled
// when MAX_NORM > 0 and the norm exceeds it.
double global_norm_and_clip(const std::vector<torch::Tensor>& counted, const std::vector<torch::Tensor>& expert_counted,
                            const std::vector<torch::Tensor>& grads, double max_norm, Communicator& model_parallel,
                            Communicator* shards, ExpertGroups experts) {
  torch::NoGradGuard no_grad;
  // Summed where the gradients are: one host read per step, not one per tensor.
  const auto device = !grads.empty() ? grads.front().device() : torch::Device(torch::kCPU);
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  auto sum_sq = sum_of_squares(counted, options), expert_sum_sq = sum_of_squares(expert_counted, options);
  if (shards) shards->all_reduce(sum_sq).wait();
  if (experts.ep) {
    if (experts.shards) experts.shards->all_reduce(expert_sum_sq).wait();
    experts.ep->all_reduce(expert_sum_sq).wait();
  }
  sum_sq += expert_sum_sq;
  model_parallel.all_reduce(sum_sq).wait();
  const double norm = std::sqrt(sum_sq.item<double>());
  if (max_norm > 0.0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    at::_foreach_mul_(grads, scale);  // one multi-tensor kernel per chunk of tensors on a GPU
  }
  return norm;
}

}  // namespace

double clip_grad_norm(const std::vector<ParallelParameter>& params, double max_norm, Communicator& model_parallel,
                      int64_t tp_rank, Communicator* shards, ExpertGroups experts) {
  std::vector<torch::Tensor> counted, expert_counted, grads;
  for (const auto& p : params) {
    if (!p.tensor.grad().defined()) continue;
    grads.push_back(p.tensor.grad());
    // Count every parameter once: tp-replicated ones on tp rank 0, tied copies at their owner.
    if (!p.counted_on(tp_rank)) continue;
    (p.expert ? expert_counted : counted).push_back(p.tensor.grad());
  }
  return global_norm_and_clip(counted, expert_counted, grads, max_norm, model_parallel, shards, experts);
}

double clip_sharded_grad_norm(const std::vector<torch::Tensor>& counted, const std::vector<torch::Tensor>& grads,
                              double max_norm, Communicator& model_parallel, Communicator& shards,
                              const std::vector<torch::Tensor>& expert_counted, ExpertGroups experts) {
  return global_norm_and_clip(counted, expert_counted, grads, max_norm, model_parallel, &shards, experts);
}

}  // namespace loom::parallel
