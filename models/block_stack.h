// A model's repeated blocks (transformer layers), declared so that the trainer
// can wrap each from outside, as torchtitan applies FSDP and activation
// checkpointing to a model's layers: ZeRO-3 gathers a block's parameters around
// its forward and backward, full recomputation reruns it in backward. The model
// only runs the stack; it knows nothing of either.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace loom::models {

// One block: hidden [B, S, H] -> hidden, the same shape.
class BlockModule : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& hidden) = 0;
};

class BlockStackImpl : public torch::nn::Module {
 public:
  // How a block runs: given its layer and its plain forward RUN; the default calls RUN.
  using Wrapper = std::function<torch::Tensor(int64_t layer, const torch::Tensor& hidden,
                                              const std::function<torch::Tensor(const torch::Tensor&)>& run)>;

  // FIRST_LAYER: the model-wide index of the first block (pipeline pieces hold later layers).
  explicit BlockStackImpl(int64_t first_layer = 0) : first_layer_(first_layer) {}
  // Appends BLOCK as child "N" (N counted from 0 in this stack).
  void push_back(std::shared_ptr<BlockModule> block);
  size_t size() const { return blocks_.size(); }
  const std::shared_ptr<BlockModule>& operator[](size_t i) const { return blocks_[i]; }
  int64_t layer(size_t i) const { return first_layer_ + static_cast<int64_t>(i); }
  // Every block in turn, each through the wrappers.
  torch::Tensor forward(torch::Tensor hidden);
  // WRAPPER goes around every block's run, outside those added before.
  void wrap(Wrapper wrapper) { wrappers_.push_back(std::move(wrapper)); }
  bool wrapped() const { return !wrappers_.empty(); }

 private:
  int64_t first_layer_;
  std::vector<std::shared_ptr<BlockModule>> blocks_;
  std::vector<Wrapper> wrappers_;
};
TORCH_MODULE(BlockStack);

}  // namespace loom::models
