#include "parallel/tp_rng.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Optional.h>  // c10::optional: a class of its own in LibTorch 1.13, std::optional's alias in 2.x

namespace loom::parallel {

TensorParallelRng::TensorParallelRng(uint64_t seed, int64_t tp_rank, int64_t dp_rank, int64_t pp_rank) {
  // Data-parallel ranks see other samples anyway; tp peers must share the replicated stream.
  seed += 7919 * static_cast<uint64_t>(dp_rank) + 104729 * static_cast<uint64_t>(pp_rank);
  torch::manual_seed(seed);
  split_ = at::make_generator<at::CPUGeneratorImpl>(seed + 2718 + 101 * static_cast<uint64_t>(tp_rank));
}

torch::Tensor TensorParallelRng::state() const {
  auto replicated = at::detail::getDefaultCPUGenerator().get_state();
  return torch::cat(
      {torch::tensor({replicated.numel()}, torch::kInt64).view(torch::kUInt8), replicated, split_.get_state()});
}

void TensorParallelRng::set_state(const torch::Tensor& state) {
  const int64_t n = state.narrow(0, 0, 8).clone().view(torch::kInt64).item<int64_t>();
  TORCH_CHECK(state.numel() > 8 + n, "RNG state of ", state.numel(), " bytes is truncated");
  auto generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(state.narrow(0, 8, n).clone());
  split_.set_state(state.narrow(0, 8 + n, state.numel() - 8 - n).clone());
}

torch::Tensor dropout(const torch::Tensor& x, double p, bool training, at::Generator* generator) {
  if (!training || p == 0.0) return x;
  // The masks come from the CPU's generators on every device: the default one, which checkpoints
  // and recomputation save and restore, and the split one, a CPU generator. A GPU run then drops
  // the elements a CPU run drops (bench/gpu/check.sh compares them), at the cost of drawing the
  // masks on the host and copying them over.
  auto keep =
      torch::empty_like(x, x.options().device(torch::kCPU))
          .bernoulli_(1.0 - p, generator ? c10::optional<at::Generator>(*generator) : c10::optional<at::Generator>());
  return x * keep.to(x.device()) / (1.0 - p);
}

}  // namespace loom::parallel
