#include "models/language_model.h"

#include "core/errors.h"
#include "parallel/ring_attention.h"

namespace loom::models {

torch::Tensor TensorParallelContext::cp_positions(int64_t seq_len, const torch::Device& device) const {
  const auto positions = parallel::context_parallel_positions(seq_len, cp_size(), cp ? cp->rank() : 0);
  return torch::tensor(positions, torch::TensorOptions().dtype(torch::kInt64)).to(device);
}

const torch::Tensor& require_scalar_loss(const torch::Tensor& loss) {
  if (loss.defined() && loss.numel() == 1) return loss;
  throw InputError("the model's forward returned " +
                   (loss.defined() ? "a tensor of shape " + c10::str(loss.sizes()) : std::string("nothing")) +
                   " where the trainer takes the batch's mean loss, one number (LanguageModel::forward): "
                   "reduce it (.mean()) before returning it");
}

void require_layout_support(const LanguageModel& model, int64_t cp, Recompute recompute) {
  if (cp > 1 && !model.splits_sequences_over_cp()) {
    throw InputError(
        "config key 'parallel.cp': this model does not split its sequences over a context-parallel group "
        "(LanguageModel::splits_sequences_over_cp), so at cp " +
        std::to_string(cp) + " each rank would train on its part of every sequence alone; set parallel.cp to 1");
  }
  // const_cast: block_stack() is non-const for the trainer's wrapping; asking whether there is one changes nothing.
  if (recompute == Recompute::full && const_cast<LanguageModel&>(model).block_stack() == nullptr) {
    throw InputError(
        "config key 'train.recompute': full recomputation re-runs the blocks a model declares "
        "(LanguageModel::block_stack), and this model declares none, so every activation would still be kept; "
        "declare its blocks in a BlockStack (models/block_stack.h), or set train.recompute to none");
  }
  if (recompute == Recompute::selective && !model.recomputes_selectively()) {
    throw InputError(
        "config key 'train.recompute': selective recomputation re-runs the attention core in backward, and this "
        "model's attention does not (LanguageModel::recomputes_selectively), so every activation would still be "
        "kept; use loom's attention (models/self_attention.h) or parallel::recompute_in_backward in your own, or set "
        "train.recompute to full (with a BlockStack) or none");
  }
}

PipelineModelFactory whole_model_only(ModelFactory make_model) {
  return [make_model = std::move(make_model)](const Config& config, TensorParallelContext tp,
                                              PipelinePosition position) -> std::shared_ptr<LanguageModel> {
    if (!position.whole()) {
      throw InputError(
          "config key 'parallel.pp': this model is built whole (a ModelFactory), so it cannot be split "
          "into " +
          std::to_string(position.count) +
          " pipeline pieces; set parallel.pp and parallel.virtual_stages to 1, or give train_main a "
          "PipelineModelFactory");
    }
    return make_model(config, tp);
  };
}

}  // namespace loom::models
