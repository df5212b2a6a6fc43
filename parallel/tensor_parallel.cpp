#include "parallel/tensor_parallel.h"

#include <limits>

#include "core/precision.h"
#include "parallel/fused_cross_entropy.h"
#include "parallel/init.h"
#include "parallel/tp_regions.h"
#include "parallel/weight_grad_store.h"

namespace loom::parallel {

ColumnParallelLinearImpl::ColumnParallelLinearImpl(ColumnParallelLinearOptions options_, Communicator& tp)
    : options(std::move(options_)), tp_(&tp) {
  TORCH_CHECK(options.out_features() % tp.size() == 0, options.name(), ": ", options.out_features(),
              " output features do not split into ", tp.size(), " tensor-parallel parts");
  auto full = init_normal(options.seed(), options.name() + ".weight", {options.out_features(), options.in_features()},
                          options.init_std());
  weight = register_parallel_parameter("weight", slice_along(full, 0, tp), {options.name() + ".weight", {}, 0});
  if (options.bias()) {
    bias = register_parallel_parameter("bias", torch::zeros({options.out_features() / tp.size()}),
                                       {options.name() + ".bias", {}, 0});
  }
}

torch::Tensor enter_column_parallel_region(const torch::Tensor& input, Communicator& tp, bool sequence_parallel) {
  return sequence_parallel ? gather_from_sequence_region(input, tp) : copy_to_tp_region(input, tp);
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& input) {
  return forward_entered(enter_column_parallel_region(input, *tp_, options.sequence_parallel()));
}

torch::Tensor ColumnParallelLinearImpl::forward_entered(const torch::Tensor& x) {
  auto y = linear_deferring_weight_grad(x, cast_to_activation(weight, x), cast_to_activation(bias, x));
  return options.gather_output() ? gather_from_tp_region(y, *tp_) : y;
}

std::vector<ParallelParameter> ColumnParallelLinearImpl::parallel_parameters() const {
  return collect_parallel_parameters(*this);
}

RowParallelLinearImpl::RowParallelLinearImpl(RowParallelLinearOptions options_, Communicator& tp)
    : options(std::move(options_)), tp_(&tp) {
  TORCH_CHECK(options.in_features() % tp.size() == 0, options.name(), ": ", options.in_features(),
              " input features do not split into ", tp.size(), " tensor-parallel parts");
  auto full = init_normal(options.seed(), options.name() + ".weight", {options.out_features(), options.in_features()},
                          options.init_std());
  weight = register_parallel_parameter("weight", slice_along(full, 1, tp), {options.name() + ".weight", {}, 1});
  if (options.bias()) {
    // Replicated, but fed by sequence-split activations under sequence parallelism.
    bias = register_parallel_parameter("bias", torch::zeros({options.out_features()}),
                                       {options.name() + ".bias", {}, -1, options.sequence_parallel()});
  }
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& input) {
  // The usual slip at tp > 1, a column layer's gather_output against input_is_parallel: said with
  // this layer's name rather than as a matrix product that cannot be multiplied.
  const bool parallel_input = options.input_is_parallel();
  const int64_t expected = parallel_input ? options.in_features() / tp_->size() : options.in_features();
  TORCH_CHECK(input.dim() > 0 && input.size(-1) == expected, options.name(), ": its input has ",
              input.dim() > 0 ? input.size(-1) : 0, " features where it takes ", expected, " (",
              parallel_input ? "input_is_parallel: this rank's part of " : "input_is_parallel false: all ",
              options.in_features(),
              " features; a ColumnParallelLinear before it gives a part, or all with gather_output)");
  auto x = parallel_input ? input : scatter_to_tp_region(input, *tp_);
  // On one rank the reduction is the identity, so the bias joins the product: cuBLAS adds it in
  // the matrix product's epilogue instead of a broadcasting pass over the output.
  const bool one_rank = tp_->size() == 1;
  auto partial = linear_deferring_weight_grad(x, cast_to_activation(weight, x),
                                              one_rank ? cast_to_activation(bias, x) : torch::Tensor());
  auto y = options.sequence_parallel() ? reduce_scatter_to_sequence_region(partial, *tp_)
                                       : reduce_from_tp_region(partial, *tp_);
  return bias.defined() && !one_rank ? y + cast_to_activation(bias, y) : y;
}

std::vector<ParallelParameter> RowParallelLinearImpl::parallel_parameters() const {
  return collect_parallel_parameters(*this);
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(VocabParallelEmbeddingOptions options_, Communicator& tp)
    : options(std::move(options_)), tp_(&tp) {
  const int64_t v = options.num_embeddings(), t = tp.size();
  padded_vocab_ = (v + t - 1) / t * t;
  vocab_start_ = padded_vocab_ / t * tp.rank();
  auto full = init_normal(options.seed(), options.name(), {v, options.embedding_dim()}, options.init_std());
  if (padded_vocab_ > v) full = torch::cat({full, torch::zeros({padded_vocab_ - v, options.embedding_dim()})});
  ParallelParameter spec{options.name(), {}, 0};
  spec.global_shape = {options.num_embeddings(), options.embedding_dim()};  // without the padding
  weight = register_parallel_parameter("weight", slice_along(full, 0, tp), spec);
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& tokens) {
  const int64_t rows = weight.size(0);
  auto outside = (tokens < vocab_start_).logical_or(tokens >= vocab_start_ + rows);
  auto local = (tokens - vocab_start_).masked_fill(outside, 0);
  auto partial = torch::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
  return options.sequence_parallel() ? reduce_scatter_to_sequence_region(partial, *tp_)
                                     : reduce_from_tp_region(partial, *tp_);
}

std::vector<ParallelParameter> VocabParallelEmbeddingImpl::parallel_parameters() const {
  return collect_parallel_parameters(*this);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t vocab_start, int64_t vocab_size, Communicator* tp) {
    const int64_t local = logits.size(1);
    auto x = logits.detach().clone();
    const int64_t first_pad = std::max<int64_t>(0, vocab_size - vocab_start);
    if (first_pad < local) {
      // Padding columns: -inf logits contribute exp(-inf) = 0 and never hold the max.
      x.narrow(1, first_pad, local - first_pad).fill_(-std::numeric_limits<float>::infinity());
    }
    auto max = std::get<0>(x.max(1)).contiguous();
    tp->all_reduce(max, ReduceOp::max).wait();
    x.sub_(max.unsqueeze(1));

    auto outside = (targets < vocab_start).logical_or(targets >= vocab_start + local);
    auto index = (targets - vocab_start).masked_fill(outside, 0);
    auto target_logit = x.gather(1, index.unsqueeze(1)).squeeze(1).masked_fill(outside, 0.0);
    auto exp = x.exp_();
    // One all-reduce carries both sums: of the exponentials and of the target logit.
    auto sums = torch::stack({exp.sum(1), target_logit}).contiguous();
    tp->all_reduce(sums).wait();
    auto sum_exp = sums[0];
    // A target of ignore_index (-100, data.eod_mask_loss's) has loss 0 and no gradient, as in at::cross_entropy_loss.
    auto ignored = targets == -100;
    ctx->save_for_backward({exp.div_(sum_exp.unsqueeze(1)), index, outside, ignored});
    return (sum_exp.log() - sums[1]).masked_fill_(ignored, 0.0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto grad = saved[0].clone();  // softmax
    auto hit = saved[2].logical_not().to(grad.scalar_type());
    grad.scatter_add_(1, saved[1].unsqueeze(1), -hit.unsqueeze(1));
    grad.mul_(grads[0].masked_fill(saved[3], 0.0).unsqueeze(1));
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

namespace {
torch::Tensor at_least_fp32(const torch::Tensor& logits) {
  return logits.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat);
}
}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           int64_t vocab_start, int64_t vocab_size, Communicator& tp) {
  if (tp.size() == 1 && vocab_start == 0 && logits.size(1) == vocab_size) {
    // One rank holds every column (no padding): LibTorch's log-softmax and NLL read and write
    // the logits twice forward and three times back, where the distributed form takes about
    // twelve passes (at a 128k vocabulary, 4 GiB of fp32 logits per micro-batch of 8k tokens).
    // On a GPU, fp16 logits are read as they are, the log-softmax writing fp32 (and its backward
    // fp16): no fp32 copy of the logits either way. LibTorch 2.11's GPU kernel takes that form for
    // fp16 only (bf16: "conversion is supported for Half type only", seen on an H100), the CPU's
    // for neither; they upcast first, to the same values.
    // On a GPU in a build with loom's kernels, one pass forward and one back, in the logits' own
    // type (parallel/fused_cross_entropy.h).
    if (fused_cross_entropy_takes(logits)) return fused_cross_entropy(logits, targets);
    if (logits.is_cuda() && logits.scalar_type() == torch::kHalf)
      return at::nll_loss(at::_log_softmax(logits, 1, /*half_to_float=*/true), targets, {}, at::Reduction::None);
    return at::cross_entropy_loss(at_least_fp32(logits), targets, {}, at::Reduction::None);
  }
  return VocabParallelCrossEntropy::apply(at_least_fp32(logits), targets, vocab_start, vocab_size, &tp);
}

}  // namespace loom::parallel
