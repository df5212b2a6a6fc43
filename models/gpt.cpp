#include "models/gpt.h"

#include <torch/version.h>

#include <cmath>
#include <limits>

#include "core/precision.h"
#include "models/causal_attention.h"
#include "models/gelu.h"
#include "parallel/init.h"
#include "parallel/recompute.h"
#include "parallel/tp_regions.h"

namespace loom::models {
namespace {

using parallel::ParallelParameter;

constexpr double kInitStd = 0.02;
constexpr double kLayerNormEps = 1e-5;

// Dropout in the residual stream: replicated over tp, unless sequence parallelism split it.
torch::Tensor residual_dropout(const torch::Tensor& x, double p, bool training, const TensorParallelContext& tp) {
  return parallel::dropout(x, p, training, tp.sequence_parallel && tp.rng ? &tp.rng->split() : nullptr);
}

// The word embedding, also the output layer's weight (tied). Its init is
// seeded by name, so a second copy on the last pipeline stage starts equal.
parallel::VocabParallelEmbedding make_word_embedding(const GPTOptions& options, const TensorParallelContext& tp) {
  return parallel::VocabParallelEmbedding(
      parallel::VocabParallelEmbeddingOptions(options.vocab_size, options.hidden_size)
          .name("wte")
          .seed(options.seed)
          .init_std(kInitStd)
          .sequence_parallel(tp.sequence_parallel),
      *tp.tp);
}

}  // namespace

GPTOptions GPTOptions::from_config(const Config& config) {
  GPTOptions o;
  o.vocab_size = config.model.vocab_size;
  o.seq_len = config.model.seq_len;
  o.hidden_size = config.model.hidden_size;
  o.num_heads = config.model.num_heads;
  o.ffn_hidden_size = config.ffn_size();
  o.num_layers = config.model.num_layers;
  o.dropout = config.model.dropout;
  o.seed = static_cast<uint64_t>(config.train.seed);
  o.recompute = config.train.recompute;
  o.moe = config.model.moe;
  o.activation_dtype = Precision::of(config.train.precision).activations;
  if (config.parallel.dp > 0) o.loss_scale = 1.0 / static_cast<double>(config.micro_batches_per_step());
  return o;
}

GPTPositionEmbeddingImpl::GPTPositionEmbeddingImpl(const GPTOptions& options, bool sequence_parallel) {
  weight = register_parallel_parameter(
      "weight", parallel::init_normal(options.seed, "wpe", {options.seq_len, options.hidden_size}, kInitStd),
      {"wpe", {}, -1, sequence_parallel});
}

GPTInputStageImpl::GPTInputStageImpl(const GPTOptions& options, TensorParallelContext tp) : options_(options), tp_(tp) {
  wte_ = register_module("wte", make_word_embedding(options, tp));
  wpe_ = register_module("wpe", GPTPositionEmbedding(options, tp.sequence_parallel));
}

torch::Tensor GPTInputStageImpl::forward(const torch::Tensor& tokens) {
  // The embedding's rows come in its parameters' dtype; the model computes in options_.activation_dtype.
  auto words = wte_->forward(tokens).to(options_.activation_dtype);  // [B, S or S / tp, H]
  // With sequence parallelism this rank holds positions [r * S / tp, (r + 1) * S / tp).
  const int64_t first = tp_.sequence_parallel ? words.size(1) * tp_.tp->rank() : 0;
  return residual_dropout(words + cast_to_activation(wpe_->weight.narrow(0, first, words.size(1)), words),
                          options_.dropout, is_training(), tp_);
}

std::vector<ParallelParameter> GPTInputStageImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

GPTBlockImpl::GPTBlockImpl(const GPTOptions& options, int64_t layer, TensorParallelContext tp)
    : options_(options), layer_(layer), tp_(tp) {
  const int64_t h = options.hidden_size, f = options.ffn_hidden_size;
  const std::string p = "h." + std::to_string(layer) + ".";
  const bool sp = tp.sequence_parallel;
  // GPT-2 scales the init of the projections that feed the residual stream by 1/sqrt(2L).
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(options.num_layers));
  // Registered in order of use: the parameters are collected in this order (parallel/parallel_module.h).
  ln_1_ = register_module("ln_1", Norm(NormKind::layernorm, p + "ln_1", h, sp, kLayerNormEps));
  // QKV rows are laid out head by head ([heads, 3, head_dim]), so the column
  // split gives each tp rank whole heads.
  qkv_ = register_module(
      "qkv",
      parallel::ColumnParallelLinear(
          parallel::ColumnParallelLinearOptions(h, 3 * h).name(p + "attn.qkv").seed(options.seed).sequence_parallel(sp),
          *tp.tp));
  proj_ = register_module("proj", parallel::RowParallelLinear(parallel::RowParallelLinearOptions(h, h)
                                                                  .name(p + "attn.proj")
                                                                  .seed(options.seed)
                                                                  .init_std(residual_std)
                                                                  .input_is_parallel(true)
                                                                  .sequence_parallel(sp),
                                                              *tp.tp));
  ln_2_ = register_module("ln_2", Norm(NormKind::layernorm, p + "ln_2", h, sp, kLayerNormEps));
  if (is_moe_layer(options.moe, layer)) {
    MoELayerOptions moe;
    moe.hidden_size = h;
    moe.ffn_hidden_size = f;
    moe.moe = options.moe;
    moe.layer = layer;
    moe.seed = options.seed;
    moe.init_std = kInitStd;
    moe.output_init_std = residual_std;
    moe.sequence_parallel = sp;
    moe.loss_scale = options.loss_scale;
    moe.split_generator = tp.rng ? &tp.rng->split() : nullptr;
    moe_ = register_module("moe", MoELayer(moe, *tp.ep, *tp.tp));
  } else {
    fc_ = register_module(
        "fc",
        parallel::ColumnParallelLinear(
            parallel::ColumnParallelLinearOptions(h, f).name(p + "mlp.fc").seed(options.seed).sequence_parallel(sp),
            *tp.tp));
    fc_proj_ = register_module("fc_proj", parallel::RowParallelLinear(parallel::RowParallelLinearOptions(f, h)
                                                                          .name(p + "mlp.proj")
                                                                          .seed(options.seed)
                                                                          .init_std(residual_std)
                                                                          .input_is_parallel(true)
                                                                          .sequence_parallel(sp),
                                                                      *tp.tp));
  }
  causal_mask_ = register_buffer("causal_mask", torch::ones({options.seq_len, options.seq_len}, torch::kBool).triu(1));
  core_fn_ = [this](const torch::Tensor& qkv, const torch::Tensor&, const torch::Tensor&) {
    return attention_core(qkv);
  };
}

torch::Tensor GPTBlockImpl::attention_core(const torch::Tensor& qkv) {
  const int64_t heads = options_.num_heads / tp_.tp->size(), d = options_.hidden_size / options_.num_heads;
  const int64_t b = qkv.size(0), s = qkv.size(1);
  const bool attention_dropout = options_.dropout > 0 && is_training();
  // On CPU without attention dropout, head by head (models/causal_attention.h): the same function.
  if (!attention_dropout && qkv.device().is_cpu()) return causal_attention(qkv, heads);
  auto parts = qkv.view({b, s, heads, 3, d}).permute({3, 0, 2, 1, 4});
  auto q = parts[0], k = parts[1], v = parts[2];  // [B, heads, S, d]
#if TORCH_VERSION_MAJOR >= 2
  // LibTorch 2.x fuses attention (flash or memory-efficient kernels on GPUs):
  // the S x S scores are never stored. Dropout is refused on GPUs (launch/trainer.cpp).
  if (!attention_dropout && !qkv.device().is_cpu()) {
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true)
        .transpose(1, 2)
        .reshape({b, s, heads * d});
  }
#endif
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  scores = scores.masked_fill(causal_mask_.narrow(0, 0, s).narrow(1, 0, s), -std::numeric_limits<float>::infinity());
  // Heads are split across tp, so each rank draws its own attention-dropout mask.
  auto probs = parallel::dropout(torch::softmax(scores, -1), options_.dropout, is_training(),
                                 tp_.rng ? &tp_.rng->split() : nullptr);
  return torch::matmul(probs, v).transpose(1, 2).reshape({b, s, heads * d});
}

torch::Tensor GPTBlockImpl::attention(const torch::Tensor& x) {
  auto qkv = qkv_->forward(x);  // [B, S, heads * 3 * d], the full sequence
  // Selective recomputation (Korthikanti et al.): the S x S scores and probabilities are
  // most of a block's activation memory and cheap to recompute.
  auto context = recomputing(Recompute::selective) ? parallel::recompute_in_backward(core_fn_, split_generator(), qkv)
                                                   : attention_core(qkv);
  return proj_->forward(context);
}

torch::Tensor GPTBlockImpl::mlp(const torch::Tensor& x, bool record) {
  if (moe_) return moe_->forward(x, record);
  return fc_proj_->forward(gelu_tanh(fc_->forward(x)));
}

torch::Tensor GPTBlockImpl::block(const torch::Tensor& hidden) {
  // Under full recomputation (applied by the trainer around the block) this runs twice
  // per micro-batch: without autograd in forward, with it in backward. The MoE
  // statistics count the first.
  const bool rerun = options_.recompute == Recompute::full && is_training() && torch::GradMode::is_enabled();
  auto x = hidden + residual_dropout(attention(ln_1_->forward(hidden)), options_.dropout, is_training(), tp_);
  return x + residual_dropout(mlp(ln_2_->forward(x), !rerun), options_.dropout, is_training(), tp_);
}

torch::Tensor GPTBlockImpl::forward(const torch::Tensor& hidden) {
  return block(hidden);
}

bool GPTBlockImpl::recomputing(Recompute kind) const {
  return options_.recompute == kind && is_training() && torch::GradMode::is_enabled();
}

at::Generator* GPTBlockImpl::split_generator() const {
  return tp_.rng ? &tp_.rng->split() : nullptr;
}

std::vector<ParallelParameter> GPTBlockImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

GPTOutputStageImpl::GPTOutputStageImpl(const GPTOptions& options, TensorParallelContext tp,
                                       torch::Tensor word_embedding, int64_t vocab_start)
    : options_(options), tp_(tp), wte_(std::move(word_embedding)), vocab_start_(vocab_start) {
  ln_f_ = register_module("ln_f",
                          Norm(NormKind::layernorm, "ln_f", options.hidden_size, tp.sequence_parallel, kLayerNormEps));
}

torch::Tensor GPTOutputStageImpl::logits(const torch::Tensor& hidden) {
  auto x = ln_f_->forward(hidden);
  x = tp_.sequence_parallel ? parallel::gather_from_sequence_region(x, *tp_.tp)
                            : parallel::copy_to_tp_region(x, *tp_.tp);
  return torch::linear(x, cast_to_activation(wte_, x));
}

torch::Tensor GPTOutputStageImpl::forward(const torch::Tensor& hidden, const torch::Tensor& targets) {
  // The loss is computed in fp32 whatever the activations' dtype.
  auto l = logits(hidden).to(torch::kFloat);
  return parallel::vocab_parallel_cross_entropy(l.view({-1, l.size(-1)}), targets.reshape({-1}), vocab_start_,
                                                options_.vocab_size, *tp_.tp)
      .mean();
}

std::vector<ParallelParameter> GPTOutputStageImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

GPTImpl::GPTImpl(const GPTOptions& options, TensorParallelContext tp, PipelinePosition position)
    : options_(options), position_(position) {
  TORCH_CHECK(position.count >= 1 && position.index >= 0 && position.index < position.count &&
                  options.num_layers % position.count == 0,
              "GPT: ", options.num_layers, " layers cannot be split into ", position.count, " pipeline pieces");
  if (!tp.tp) {
    own_tp_ = std::make_shared<parallel::SelfCommunicator>("tp", 0, std::make_shared<parallel::CommStats>());
    tp.tp = own_tp_.get();
  }
  if (!tp.ep) {
    own_ep_ = std::make_shared<parallel::SelfCommunicator>("ep", 0, std::make_shared<parallel::CommStats>());
    tp.ep = own_ep_.get();
  }
  tp_ = tp;
  if (position.first()) input = register_module("input", GPTInputStage(options, tp));
  blocks = register_module("blocks", BlockStack(position.index * (options.num_layers / position.count)));
  const int64_t per_piece = options.num_layers / position.count;
  for (int64_t i = position.index * per_piece; i < (position.index + 1) * per_piece; ++i) {
    blocks->push_back(GPTBlock(options, i, tp).ptr());
  }
  if (position.last()) {
    if (!position.first()) {
      tied_wte_ = register_module("tied_wte", make_word_embedding(options, tp));
      tied_wte_->mark_tied_copies();  // the first stage's embedding owns it
    }
    const auto& wte = position.first() ? input->word_embedding() : tied_wte_;
    output = register_module("output", GPTOutputStage(options, tp, wte->weight, wte->vocab_start()));
  }
}

torch::Tensor GPTImpl::forward(const torch::Tensor& input_, const torch::Tensor& targets) {
  auto hidden = position_.first() ? input->forward(input_) : input_;
  hidden = blocks->forward(hidden);  // each block through whatever the trainer wrapped around it
  return position_.last() ? output->forward(hidden, targets) : hidden;
}

std::vector<ParallelParameter> GPTImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

std::vector<int64_t> GPTImpl::activation_shape(int64_t micro_batch_size) const {
  const int64_t s = tp_.sequence_parallel ? options_.seq_len / tp_.tp->size() : options_.seq_len;
  return {micro_batch_size, s, options_.hidden_size};
}

std::vector<torch::Tensor> GPTImpl::tied_parameters() const {
  if (position_.whole()) return {};
  if (position_.first()) return {input->word_embedding()->weight};
  if (position_.last()) return {tied_wte_->weight};
  return {};
}

std::vector<MoEStats*> GPTImpl::moe_stats() {
  std::vector<MoEStats*> all;
  for (size_t i = 0; i < blocks->size(); ++i) {
    if (auto moe = std::static_pointer_cast<GPTBlockImpl>((*blocks)[i])->moe()) all.push_back(&moe->stats());
  }
  return all;
}

std::shared_ptr<LanguageModel> make_gpt(const Config& config, TensorParallelContext tp) {
  return std::make_shared<GPTImpl>(GPTOptions::from_config(config), tp);
}

std::shared_ptr<LanguageModel> make_gpt_piece(const Config& config, TensorParallelContext tp,
                                              PipelinePosition position) {
  return std::make_shared<GPTImpl>(GPTOptions::from_config(config), tp, position);
}

int64_t GPTImpl::num_parameters() const {
  const int64_t h = options_.hidden_size, f = options_.ffn_hidden_size;
  const int64_t mlp = 2 * h * f + f + h;
  const int64_t block = 4 * h + 3 * h * h + 3 * h + h * h + h + mlp;
  int64_t experts = 0;  // what MoE blocks have beyond a dense block: a router and E - 1 more MLPs
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    if (is_moe_layer(options_.moe, layer))
      experts += options_.moe.num_experts * h + (options_.moe.num_experts - 1) * mlp;
  }
  return options_.vocab_size * h + options_.seq_len * h + options_.num_layers * block + experts + 2 * h;
}

}  // namespace loom::models
