#include "launch/block_wrapping.h"

#include <map>
#include <set>

#include "parallel/recompute.h"

namespace loom::launch {

std::vector<int64_t> block_of_parameters(const std::vector<std::shared_ptr<models::LanguageModel>>& pieces,
                                         const std::vector<parallel::ParallelParameter>& params) {
  std::map<const c10::TensorImpl*, int64_t> layer_of;
  std::set<int64_t> layers;
  for (const auto& piece : pieces) {
    auto* stack = piece->block_stack();
    for (size_t i = 0; stack && i < stack->size(); ++i) {
      // A ZeRO-3 unit is found by its layer: two blocks of one rank must not share one
      // (pipeline pieces give their BlockStack the model-wide index of their first block).
      TORCH_CHECK(layers.insert(stack->layer(i)).second, "two declared blocks on this rank have layer ",
                  stack->layer(i), ": give each pipeline piece's BlockStack its first block's model-wide index");
      for (const auto& p : (*stack)[i]->parameters()) layer_of[p.unsafeGetTensorImpl()] = stack->layer(i);
    }
  }
  std::vector<int64_t> block_of;
  for (const auto& p : params) {
    auto it = layer_of.find(p.tensor.unsafeGetTensorImpl());
    block_of.push_back(it == layer_of.end() ? -1 : it->second);
  }
  return block_of;
}

void wrap_blocks(models::BlockStackImpl& stack, parallel::FullyShardedParameters* units, bool recompute_full,
                 at::Generator* split_generator) {
  if (recompute_full) {
    // Innermost, so it must come first: it re-runs the block itself and would skip wrappers inside it.
    TORCH_CHECK(!stack.wrapped(), "wrap_blocks: full recomputation must be the first wrapper of a block stack");
    // The backward re-runs the block itself, so its function must outlive the step: one per block, kept here.
    auto reruns = std::make_shared<std::vector<parallel::RecomputedFn>>();
    for (size_t i = 0; i < stack.size(); ++i) {
      reruns->push_back([block = stack[i].get()](const torch::Tensor& hidden, const torch::Tensor&,
                                                 const torch::Tensor&) { return block->forward(hidden); });
    }
    const int64_t first = stack.size() > 0 ? stack.layer(0) : 0;
    stack.wrap([reruns, first, split_generator, &stack](int64_t layer, const torch::Tensor& hidden, const auto& run) {
      // Full recomputation keeps only the block's input (innermost: it re-runs the block itself).
      if (!stack.is_training() || !torch::GradMode::is_enabled()) return run(hidden);
      return parallel::recompute_in_backward(reruns->at(static_cast<size_t>(layer - first)), split_generator, hidden);
    });
  }
  if (units) {
    // Gathers the block's parameters before its forward (and again before its backward), frees them after.
    stack.wrap([units](int64_t layer, const torch::Tensor& hidden, const auto& run) {
      return units->run(layer, [&] { return run(hidden); });
    });
  }
}

}  // namespace loom::launch
