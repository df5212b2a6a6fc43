#include "models/gpt.h"

#include "core/precision.h"
#include "models/mtp.h"
#include "parallel/init.h"
#include "parallel/keyed_dropout.h"
#include "parallel/tp_regions.h"
#include "parallel/weight_grad_store.h"

namespace loom::models {
namespace {

using parallel::ParallelParameter;

// Dropout in the residual stream: replicated over tp, unless sequence parallelism split it.
// Under context parallelism each element's mask follows from its global (sample, position,
// feature) and a key every rank draws alike (parallel/keyed_dropout.h), so the layout of the
// sequence over cp (and tp, SP) does not change which elements drop.
torch::Tensor residual_dropout(const torch::Tensor& x, double p, bool training, const TensorParallelContext& tp) {
  if (tp.cp_size() == 1 || !training || p == 0.0)
    return parallel::dropout(x, p, training, tp.sequence_parallel && tp.rng ? &tp.rng->split() : nullptr);
  const int64_t key = parallel::draw_dropout_key();
  const int64_t local = x.size(1), split = tp.sequence_parallel ? tp.tp->size() : 1;
  const int64_t seq = local * split * tp.cp_size(), features = x.size(2);
  auto positions = tp.cp_positions(seq, x.device());                             // this cp rank's tokens
  if (split > 1) positions = positions.narrow(0, tp.tp->rank() * local, local);  // ... this tp rank's share of them
  const auto options = positions.options();
  auto coordinates =
      (torch::arange(x.size(0), options).view({-1, 1, 1}) * seq + positions.view({1, -1, 1})) * features +
      torch::arange(features, options).view({1, 1, -1});
  return parallel::keyed_dropout(x, p, key, coordinates);
}

// The word embedding ("wte"), also the output layer's weight when tied, or the
// untied output layer ("lm_head"), vocabulary-parallel alike. The init is seeded
// by name, so a second copy of wte on the last pipeline stage starts equal.
parallel::VocabParallelEmbedding make_vocab_matrix(const std::string& name, const GPTOptions& options,
                                                   const TensorParallelContext& tp) {
  return parallel::VocabParallelEmbedding(
      parallel::VocabParallelEmbeddingOptions(options.vocab_size, options.hidden_size)
          .name(name)
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
  o.num_kv_heads = config.model.kv_heads();
  o.ffn_hidden_size = config.ffn_size();
  o.num_layers = config.model.num_layers;
  o.norm = config.model.norm;
  o.norm_eps = config.model.norm_eps;
  o.activation = config.model.activation;
  o.position = config.model.position;
  o.rope_theta = config.model.rope_theta;
  o.rope_scaling = config.model.rope_scaling;
  o.rope_interleave = config.model.rope_interleave;
  o.mla = config.model.mla;
  o.mtp = config.model.mtp;
  o.bias = config.model.bias;
  o.qkv_bias = config.model.qkv_bias;
  o.attention_head_dim = config.model.attention_head_dim;
  o.qk_norm = config.model.qk_norm;
  o.tie_embeddings = config.model.tie_embeddings;
  o.dropout = config.model.dropout;
  o.seed = static_cast<uint64_t>(config.train.seed);
  o.recompute = config.train.recompute;
  o.moe = config.model.moe;
  o.expert_tp = config.parallel.expert_tp > 1;
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
  wte_ = register_module("wte", make_vocab_matrix("wte", options, tp));
  if (options.position == PositionKind::learned) {
    wpe_ = register_module("wpe", GPTPositionEmbedding(options, tp.sequence_parallel));
  }
}

torch::Tensor GPTInputStageImpl::forward(const torch::Tensor& tokens) {
  // The embedding's rows come in its parameters' dtype; the model computes in options_.activation_dtype.
  auto words = wte_->forward(tokens).to(options_.activation_dtype);                 // [B, S or S / tp, H]
  if (!wpe_) return residual_dropout(words, options_.dropout, is_training(), tp_);  // rotary positions: in attention
  // With sequence parallelism this rank holds positions [r * S / tp, (r + 1) * S / tp) of its part of the sequence.
  const int64_t first = tp_.sequence_parallel ? words.size(1) * tp_.tp->rank() : 0;
  torch::Tensor rows;
  if (tp_.cp_size() > 1) {
    // Context parallelism: this rank's two chunks of the sequence, at their global positions.
    rows = wpe_->weight.index_select(
        0, tp_.cp_positions(options_.seq_len, words.device()).narrow(0, first, words.size(1)));
  } else {
    rows = wpe_->weight.narrow(0, first, words.size(1));
  }
  return residual_dropout(words + cast_to_activation(rows, words), options_.dropout, is_training(), tp_);
}

torch::Tensor GPTInputStageImpl::forward_at(const torch::Tensor& tokens, int64_t first_position) {
  TORCH_CHECK(!tp_.sequence_parallel, "incremental decoding runs without sequence parallelism");
  TORCH_CHECK(first_position + tokens.size(1) <= options_.seq_len, "GPT: positions up to ",
              first_position + tokens.size(1), " but model.seq_len is ", options_.seq_len);
  auto words = wte_->forward(tokens).to(options_.activation_dtype);
  if (!wpe_) return words;
  return words + cast_to_activation(wpe_->weight.narrow(0, first_position, words.size(1)), words);
}

std::vector<ParallelParameter> GPTInputStageImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

GPTBlockImpl::GPTBlockImpl(const GPTOptions& options, int64_t layer, TensorParallelContext tp, RotaryEmbedding rotary)
    : options_(options), layer_(layer), tp_(tp) {
  const int64_t h = options.hidden_size;
  const std::string p = "h." + std::to_string(layer) + ".";
  const bool sp = tp.sequence_parallel;
  // Registered in order of use: the parameters are collected in this order (parallel/parallel_module.h).
  ln_1_ = register_module("ln_1", Norm(options.norm, p + "ln_1", h, sp, options.norm_eps));
  attn_ = register_module("attn", SelfAttention(options, layer, tp, std::move(rotary)));
  ln_2_ = register_module("ln_2", Norm(options.norm, p + "ln_2", h, sp, options.norm_eps));
  if (is_moe_layer(options.moe, layer)) {
    MoELayerOptions moe;
    moe.hidden_size = h;
    const int64_t expert_ffn =
        options.moe.moe_intermediate_size > 0 ? options.moe.moe_intermediate_size : options.ffn_hidden_size;
    moe.ffn_hidden_size = expert_ffn;
    moe.swiglu = options.activation == Activation::swiglu;
    moe.swiglu_bias = options.bias;
    moe.moe = options.moe;
    moe.layer = layer;
    moe.seed = options.seed;
    moe.init_std = kInitStd;
    moe.output_init_std = residual_init_std(options);
    moe.sequence_parallel = sp;
    moe.expert_tp = options.expert_tp;
    moe.loss_scale = options.loss_scale;
    moe.split_generator = tp.rng ? &tp.rng->split() : nullptr;
    moe_ = register_module("moe", MoELayer(moe, *tp.ep, *tp.tp, tp.cp_size() > 1 ? tp.cp : nullptr));
    if (options.moe.n_shared_experts > 0) {
      shared_experts_ = register_module("shared_experts", Mlp(options, layer, tp, p + "moe.shared_experts.",
                                                              options.moe.n_shared_experts * expert_ffn));
    }
  } else {
    mlp_ = register_module("mlp", Mlp(options, layer, tp));
  }
}

torch::Tensor GPTBlockImpl::forward(const torch::Tensor& hidden) {
  // Under full recomputation (applied by the trainer around the block) this runs twice
  // per micro-batch: without autograd in forward, with it in backward. The MoE
  // statistics count the first.
  const bool rerun = options_.recompute == Recompute::full && is_training() && torch::GradMode::is_enabled();
  auto x = hidden + residual_dropout(attn_->forward(ln_1_->forward(hidden)), options_.dropout, is_training(), tp_);
  auto y = ln_2_->forward(x);
  return x + residual_dropout(moe_ ? moe_forward(y, !rerun && is_training()) : mlp_->forward(y), options_.dropout,
                              is_training(), tp_);
}

torch::Tensor GPTBlockImpl::forward_cached(const torch::Tensor& hidden, KVCache& cache) {
  auto x = hidden + attn_->forward_cached(ln_1_->forward(hidden), cache, layer_);
  auto y = ln_2_->forward(x);
  return x + (moe_ ? moe_forward(y, /*record=*/false) : mlp_->forward(y));
}

torch::Tensor GPTBlockImpl::moe_forward(const torch::Tensor& y, bool record) {
  auto routed = moe_->forward(y, record);
  // The shared experts read the same input as the router; their output adds to the routed one.
  return shared_experts_ ? routed + shared_experts_->forward(y) : routed;
}

std::vector<ParallelParameter> GPTBlockImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

GPTOutputStageImpl::GPTOutputStageImpl(const GPTOptions& options, TensorParallelContext tp,
                                       torch::Tensor word_embedding, int64_t vocab_start)
    : options_(options), tp_(tp), wte_(std::move(word_embedding)), vocab_start_(vocab_start) {
  ln_f_ =
      register_module("ln_f", Norm(options.norm, "ln_f", options.hidden_size, tp.sequence_parallel, options.norm_eps));
  if (!wte_.defined()) {
    lm_head_ = register_module("lm_head", make_vocab_matrix("lm_head", options, tp));
    wte_ = lm_head_->weight;
    vocab_start_ = lm_head_->vocab_start();
  }
}

torch::Tensor GPTOutputStageImpl::logits(const torch::Tensor& hidden) {
  return head(final_norm(hidden));
}

torch::Tensor GPTOutputStageImpl::final_norm(const torch::Tensor& hidden) {
  return ln_f_->forward(hidden);
}

torch::Tensor GPTOutputStageImpl::head(const torch::Tensor& normed) {
  auto x = tp_.sequence_parallel ? parallel::gather_from_sequence_region(normed, *tp_.tp)
                                 : parallel::copy_to_tp_region(normed, *tp_.tp);
  // A tied weight that multi-token prediction also embeds with gets its gradient in one backward
  // pass, not split in two (zb-h1's deferred weight gradients count one per micro-batch).
  if (options_.tie_embeddings && options_.mtp.depth > 0) return torch::linear(x, cast_to_activation(wte_, x));
  return parallel::linear_deferring_weight_grad(x, cast_to_activation(wte_, x));
}

torch::Tensor GPTOutputStageImpl::token_losses(const torch::Tensor& normed, const torch::Tensor& targets) {
  // The loss is computed in fp32 whatever the activations' dtype (the cross-entropy upcasts).
  auto l = head(normed);
  return parallel::vocab_parallel_cross_entropy(l.view({-1, l.size(-1)}), targets.reshape({-1}), vocab_start_,
                                                options_.vocab_size, *tp_.tp);
}

torch::Tensor GPTOutputStageImpl::forward(const torch::Tensor& hidden, const torch::Tensor& targets) {
  return token_losses(final_norm(hidden), targets).mean();
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
  // One set of rotary tables for every block of this piece.
  const RotaryEmbedding rotary =
      options.position == PositionKind::rope ? rotary_embedding_of(options) : RotaryEmbedding();
  for (int64_t i = position.index * per_piece; i < (position.index + 1) * per_piece; ++i) {
    blocks->push_back(GPTBlock(options, i, tp, rotary).ptr());
  }
  if (position.last()) {
    // The last piece reads the word embedding as its output layer (tied) or for multi-token
    // prediction's inputs: a copy of its own when it is not also the first piece.
    if (shares_word_embedding(options) && !position.first()) {
      tied_wte_ = register_module("tied_wte", make_vocab_matrix("wte", options, tp));
      tied_wte_->mark_tied_copies();  // the first stage's embedding owns it
    }
    if (!options.tie_embeddings) {
      output = register_module("output", GPTOutputStage(options, tp, torch::Tensor(), 0));
    } else {
      const auto wte = word_embedding();
      output = register_module("output", GPTOutputStage(options, tp, wte->weight, wte->vocab_start()));
    }
    if (options.mtp.depth > 0) {
      mtp_ = register_module("mtp", MultiTokenPrediction(options, tp, rotary).ptr());
      mtp_loss_sum_ = torch::zeros({}, torch::kFloat64);
    }
  }
}

parallel::VocabParallelEmbedding GPTImpl::word_embedding() const {
  return position_.first() ? input->word_embedding() : tied_wte_;
}

torch::Tensor GPTImpl::forward(const torch::Tensor& input_, const torch::Tensor& targets) {
  auto hidden = position_.first() ? input->forward(input_) : input_;
  hidden = blocks->forward(hidden);  // each block through whatever the trainer wrapped around it
  if (!position_.last()) return hidden;
  if (!mtp_ || !is_training() || !torch::GradMode::is_enabled()) return output->forward(hidden, targets);
  auto normed = output->final_norm(hidden);
  auto loss = output->token_losses(normed, targets).mean();
  auto mtp = mtp_->forward(
      normed, targets,
      [&](const torch::Tensor& tokens) { return word_embedding()->forward(tokens).to(options_.activation_dtype); },
      [&](const torch::Tensor& x, const torch::Tensor& t) { return output->token_losses(x, t); });
  if (mtp_loss_sum_.device() != mtp.device()) mtp_loss_sum_ = mtp_loss_sum_.to(mtp.device());
  mtp_loss_sum_ += mtp.detach().to(torch::kFloat64);
  // The reported loss stays the main one; the backward also carries the weighted MTP loss.
  return add_in_backward(loss, mtp * options_.mtp.loss_weight);
}

torch::Tensor GPTImpl::take_mtp_loss() {
  if (!mtp_) return {};
  auto sum = mtp_loss_sum_.clone();
  mtp_loss_sum_.zero_();
  return sum;
}

namespace {

// This rank's vocabulary slice of the logits, [B, S, V_local] -> the whole vocabulary's in fp32,
// [B, S, vocab_size]: gathered over tp, every rank then holding the same bits, the padding cut off.
torch::Tensor whole_vocabulary(const torch::Tensor& local, int64_t vocab_size, parallel::Communicator& tp) {
  return parallel::all_gather_along(local.to(torch::kFloat), -1, tp).narrow(-1, 0, vocab_size);
}

}  // namespace

torch::Tensor GPTImpl::logits(const torch::Tensor& tokens) {
  TORCH_CHECK(position_.whole(), "GPT::logits needs the whole model, not a pipeline piece");
  TORCH_CHECK(!tp_.sequence_parallel, "GPT::logits runs without sequence parallelism");
  auto local = output->logits(blocks->forward(input->forward(tokens)));
  return whole_vocabulary(local, options_.vocab_size, *tp_.tp);
}

torch::Tensor GPTImpl::forward_cached(const torch::Tensor& tokens, KVCache& cache) {
  TORCH_CHECK(position_.whole(), "incremental decoding needs the whole model, not a pipeline piece");
  TORCH_CHECK(cache.layers() == options_.num_layers, "KVCache: ", cache.layers(), " layers for a model of ",
              options_.num_layers);
  auto hidden = input->forward_at(tokens, cache.length());
  for (size_t i = 0; i < blocks->size(); ++i) {
    hidden = std::static_pointer_cast<GPTBlockImpl>((*blocks)[i])->forward_cached(hidden, cache);
  }
  return whole_vocabulary(output->logits(hidden), options_.vocab_size, *tp_.tp);
}

std::vector<ParallelParameter> GPTImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

std::vector<int64_t> GPTImpl::activation_shape(int64_t micro_batch_size) const {
  const int64_t local = options_.seq_len / tp_.cp_size();  // this cp rank's part of the sequence
  const int64_t s = tp_.sequence_parallel ? local / tp_.tp->size() : local;
  return {micro_batch_size, s, options_.hidden_size};
}

std::vector<torch::Tensor> GPTImpl::tied_parameters() const {
  if (position_.whole() || !shares_word_embedding(options_)) return {};
  if (position_.first()) return {input->word_embedding()->weight};
  if (position_.last()) return {tied_wte_->weight};
  return {};
}

std::vector<MoEStats*> GPTImpl::moe_stats() {
  std::vector<MoEStats*> all;
  for (size_t i = 0; i < blocks->size(); ++i) {
    if (auto moe = std::static_pointer_cast<GPTBlockImpl>((*blocks)[i])->moe()) all.push_back(&moe->stats());
  }
  if (mtp_) {
    for (auto* stats : mtp_->moe_stats()) all.push_back(stats);
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
  // What the layers registered, each tensor whole (unsplit by tp) and a tied copy not again:
  // no formula to keep in step with the layers (models/gpt_shapes.h has the config's).
  int64_t n = 0;
  for (const auto& p : parallel_parameters()) {
    if (p.tied_copy) continue;
    int64_t numel = 1;
    for (int64_t size : p.global_shape_for(tp_.tp->size())) numel *= size;
    n += numel;
  }
  return n;
}

}  // namespace loom::models
