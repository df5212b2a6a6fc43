#include "models/block_stack.h"

namespace loom::models {

void BlockStackImpl::push_back(std::shared_ptr<BlockModule> block) {
  register_module(std::to_string(blocks_.size()), block);
  blocks_.push_back(std::move(block));
}

torch::Tensor BlockStackImpl::forward(torch::Tensor hidden) {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    std::function<torch::Tensor(const torch::Tensor&)> run = [block = blocks_[i].get()](const torch::Tensor& x) {
      return block->forward(x);
    };
    for (const auto& wrapper : wrappers_) {
      run = [wrapper, inner = std::move(run), layer = layer(i)](const torch::Tensor& x) {
        return wrapper(layer, x, inner);
      };
    }
    hidden = run(hidden);
  }
  return hidden;
}

}  // namespace loom::models
