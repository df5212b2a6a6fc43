#include "models/mtp.h"

#include <string>
#include <utility>

#include "parallel/ring_attention.h"
#include "parallel/tp_regions.h"

namespace loom::models {
namespace {

// T [B, S] moved N positions left, the last N filled with token 0 (positions without a label, masked).
torch::Tensor shifted_left(const torch::Tensor& t, int64_t n) {
  if (n == 0) return t;
  const int64_t s = t.size(1);
  return torch::cat({t.narrow(1, n, s - n), torch::zeros({t.size(0), n}, t.options())}, 1);
}

struct AddInBackward : torch::autograd::Function<AddInBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& loss, const torch::Tensor&) {
    return loss.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], grads[0]};
  }
};

}  // namespace

torch::Tensor add_in_backward(const torch::Tensor& loss, const torch::Tensor& extra) {
  return AddInBackward::apply(loss, extra);
}

MultiTokenPredictionImpl::MultiTokenPredictionImpl(const GPTOptions& options, TensorParallelContext tp,
                                                   const RotaryEmbedding& rotary)
    : tp_(tp), seq_len_(options.seq_len) {
  const int64_t h = options.hidden_size;
  const bool sp = tp.sequence_parallel;
  // The modules' blocks are not among the trainer's blocks: full recomputation does not wrap them,
  // so they run as they are (and count their MoE statistics once).
  GPTOptions block_options = options;
  if (block_options.recompute == Recompute::full) block_options.recompute = Recompute::none;
  for (int64_t k = 0; k < options.mtp.depth; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".", m = "mtp" + std::to_string(k) + "_";
    Module module;
    // Registered in order of use: the parameters are collected in this order.
    module.enorm = register_module(m + "enorm", Norm(options.norm, p + "enorm", h, sp, options.norm_eps));
    module.hnorm = register_module(m + "hnorm", Norm(options.norm, p + "hnorm", h, sp, options.norm_eps));
    // Replicated over tp; under sequence parallelism each rank's part of the sequence gives part of its gradient.
    module.eh_proj = register_module(m + "eh_proj", ReplicatedLinear(p + "eh_proj", 2 * h, h, options.seed, sp));
    module.block = register_module(m + "block", GPTBlock(block_options, options.num_layers + k, tp, rotary));
    module.norm = register_module(m + "norm", Norm(options.norm, p + "norm", h, sp, options.norm_eps));
    modules_.push_back(module);
  }
}

std::pair<torch::Tensor, torch::Tensor> MultiTokenPredictionImpl::whole_sequence(const torch::Tensor& targets) {
  const auto device = targets.device();
  if (!positions_.defined() || positions_.device() != device) {
    // Worked out once: this rank's global positions, and where each cp rank's gathered tokens go.
    positions_ = tp_.cp_positions(seq_len_, device);
    std::vector<int64_t> order;
    for (int64_t r = 0; r < tp_.cp_size(); ++r) {
      for (int64_t p : parallel::context_parallel_positions(seq_len_, tp_.cp_size(), r)) order.push_back(p);
    }
    gather_order_ = torch::tensor(order, torch::kInt64).to(device);
  }
  if (tp_.cp_size() == 1) return {targets, positions_};
  // Each cp rank holds two chunks of every sequence; gathered in rank order, then put in place.
  auto gathered = parallel::all_gather_along(targets, 1, *tp_.cp);
  auto whole = torch::empty_like(gathered);
  whole.index_copy_(1, gather_order_, gathered);
  return {whole, positions_};
}

torch::Tensor MultiTokenPredictionImpl::forward(const torch::Tensor& normed, const torch::Tensor& targets,
                                                const Embed& embed, const TokenLosses& token_losses) {
  const auto [whole, positions] = whole_sequence(targets);
  const int64_t s = whole.size(1), here = targets.size(1), b = targets.size(0);
  // Token i + N of the sequence at each of this rank's positions i (0 past its end: masked).
  auto ahead = [&](int64_t n) { return shifted_left(whole, n).index_select(1, positions); };
  auto hidden = normed;
  torch::Tensor total;
  for (size_t k = 0; k < modules_.size(); ++k) {
    auto& module = modules_[k];
    const auto shift = static_cast<int64_t>(k) + 1;  // module `shift` predicts token i + shift + 1
    // The embedding of token i + shift, which the targets hold at i + shift - 1; DeepSeek puts it first.
    auto joined = torch::cat({module.enorm->forward(embed(ahead(shift - 1))), module.hnorm->forward(hidden)}, -1);
    hidden = module.block->forward(module.eh_proj->forward(joined));
    auto losses = token_losses(module.norm->forward(hidden), ahead(shift)).view({b, here});
    // The last SHIFT positions of the sequence have no token i + shift + 1. The mean over the
    // positions that have one: each cp rank's sum over that count / cp, which the trainer's mean
    // over cp makes the whole sequence's mean.
    auto valid = (positions < s - shift).to(losses.scalar_type());
    auto loss = (losses * valid).sum() / (static_cast<double>(b * (s - shift)) / static_cast<double>(tp_.cp_size()));
    total = total.defined() ? total + loss : loss;
  }
  return total / static_cast<double>(modules_.size());
}

std::vector<MoEStats*> MultiTokenPredictionImpl::moe_stats() {
  std::vector<MoEStats*> all;
  for (auto& module : modules_) {
    if (auto moe = module.block->moe()) all.push_back(&moe->stats());
  }
  return all;
}

}  // namespace loom::models
