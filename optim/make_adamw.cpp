#include "optim/make_adamw.h"

#include "optim/fully_sharded_adamw.h"
#include "optim/partitioned_optimizer.h"
#include "optim/zero_adamw.h"

namespace loom::optim {

std::unique_ptr<Optimizer> make_adamw_part(const parallel::OptimizerPart& part, std::vector<torch::Tensor> params,
                                           const AdamWOptions& options) {
  if (part.units) return std::make_unique<FullyShardedAdamW>(*part.units, *part.group, options);
  if (part.sharded_buckets)
    return std::make_unique<ZeroAdamW>(std::move(params), *part.sharded_buckets, *part.group, options);
  auto plain = std::make_unique<AdamW>(std::move(params), options);
  if (part.gradients_free) plain->use_flat_gradients();
  return plain;
}

std::unique_ptr<Optimizer> make_adamw(parallel::GradientSync& sync, const AdamWOptions& options) {
  const auto sync_parts = sync.optimizer_parts();
  std::vector<std::unique_ptr<Optimizer>> parts;
  for (const auto& part : sync_parts) {
    std::vector<torch::Tensor> params;
    for (size_t i : part.index) params.push_back(sync.parameters()[i].tensor);
    parts.push_back(make_adamw_part(part, std::move(params), options));
  }
  return join_parts(std::move(parts), sync_parts, sync.parameters().size());
}

std::unique_ptr<Optimizer> join_parts(std::vector<std::unique_ptr<Optimizer>> parts,
                                      const std::vector<parallel::OptimizerPart>& sync_parts, size_t n) {
  TORCH_CHECK(parts.size() == sync_parts.size() && !parts.empty(), "join_parts: ", parts.size(), " optimizers for ",
              sync_parts.size(), " parts");
  if (parts.size() == 1) return std::move(parts[0]);
  std::vector<size_t> part_of(n, 0);
  for (size_t p = 0; p < sync_parts.size(); ++p) {
    for (size_t i : sync_parts[p].index) part_of[i] = p;
  }
  return std::make_unique<PartitionedOptimizer>(std::move(parts), part_of);
}

}  // namespace loom::optim
