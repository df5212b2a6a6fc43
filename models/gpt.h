// loom's decoder-only transformer: GPT-2 (token and learned position embeddings,
// pre-LayerNorm blocks of causal multi-head attention and a GELU MLP, a final
// LayerNorm, an output layer tied to the token embedding) or, from the same
// options (models/gpt_options.h), Llama-shaped (RMSNorm, rotary positions,
// grouped-query attention, SwiGLU, no biases, an untied output layer).
//
// The model is three kinds of pieces so that a pipeline can deal them out:
// GPTInputStage (embeddings), GPTBlock (one transformer layer) and
// GPTOutputStage (final norm, logits and loss). Every piece is tensor
// parallel over TensorParallelContext::tp (a group of one rank: plain GPT):
// the attention's and MLP's input projections are column parallel with the
// heads split across tp, attention is local, the output projections are row
// parallel, the vocabulary is split for the embedding and the loss.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "models/block_stack.h"
#include "models/gpt_options.h"
#include "models/kv_cache.h"
#include "models/language_model.h"
#include "models/mlp.h"
#include "models/moe.h"
#include "models/norm.h"
#include "models/self_attention.h"
#include "parallel/communicator.h"
#include "parallel/parallel_parameter.h"
#include "parallel/recompute.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_rng.h"

namespace loom::models {

class MultiTokenPredictionImpl;

// GPT-2's learned positions [S, H], replicated over tp (split along the sequence
// under sequence parallelism). A module of its own so that it is collected after
// the word embedding, in order of use.
class GPTPositionEmbeddingImpl : public parallel::ParallelModule {
 public:
  GPTPositionEmbeddingImpl(const GPTOptions& options, bool sequence_parallel);
  torch::Tensor weight;
};
TORCH_MODULE(GPTPositionEmbedding);

class GPTInputStageImpl : public torch::nn::Module {
 public:
  GPTInputStageImpl(const GPTOptions& options, TensorParallelContext tp);
  // tokens [B, S] int64 -> hidden [B, S, H] ([B, S / tp, H] with sequence parallelism)
  torch::Tensor forward(const torch::Tensor& tokens);
  // For incremental decoding (no dropout, no sequence parallelism): tokens [B, S] at
  // positions FIRST_POSITION, FIRST_POSITION + 1, ... -> hidden [B, S, H].
  torch::Tensor forward_at(const torch::Tensor& tokens, int64_t first_position);
  const parallel::VocabParallelEmbedding& word_embedding() const { return wte_; }
  std::vector<parallel::ParallelParameter> parallel_parameters() const;

 private:
  GPTOptions options_;
  TensorParallelContext tp_;
  parallel::VocabParallelEmbedding wte_{nullptr};
  GPTPositionEmbedding wpe_{nullptr};
};
TORCH_MODULE(GPTInputStage);

class GPTBlockImpl : public BlockModule {
 public:
  // ROTARY: the model's rotary tables under rope, shared by its blocks.
  GPTBlockImpl(const GPTOptions& options, int64_t layer, TensorParallelContext tp, RotaryEmbedding rotary = {});
  torch::Tensor forward(const torch::Tensor& hidden) override;
  // The block over positions that follow those in CACHE, whose layer layer() it extends.
  torch::Tensor forward_cached(const torch::Tensor& hidden, KVCache& cache);
  std::vector<parallel::ParallelParameter> parallel_parameters() const;
  MoELayer moe() const { return moe_; }  // null in a dense block
  int64_t layer() const { return layer_; }

 private:
  GPTOptions options_;
  int64_t layer_;
  TensorParallelContext tp_;
  Norm ln_1_{nullptr}, ln_2_{nullptr};
  SelfAttention attn_{nullptr};
  Mlp mlp_{nullptr};
  MoELayer moe_{nullptr};        // instead of mlp_ in an MoE block
  Mlp shared_experts_{nullptr};  // beside moe_ (model.moe.n_shared_experts > 0)
  // The MoE block's MLP: the routed experts plus the shared ones.
  torch::Tensor moe_forward(const torch::Tensor& y, bool record);
};
TORCH_MODULE(GPTBlock);

class GPTOutputStageImpl : public torch::nn::Module {
 public:
  // WORD_EMBEDDING is this rank's shard of the input stage's weight when both
  // stages live in this process (the tie is then one tensor); it is not registered here.
  // Undefined with an untied output layer, which the stage then holds as `lm_head`.
  GPTOutputStageImpl(const GPTOptions& options, TensorParallelContext tp, torch::Tensor word_embedding,
                     int64_t vocab_start);
  // hidden, targets [B, S] -> mean cross-entropy over B*S tokens
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& targets);
  // This rank's slice of the (padded) vocabulary's logits, [B, S, V_local].
  torch::Tensor logits(const torch::Tensor& hidden);
  // The pieces of forward and logits, for multi-token prediction (models/mtp.h): the final norm;
  // a normed hidden state's logits (this rank's slice); each position's cross-entropy [B S], fp32.
  torch::Tensor final_norm(const torch::Tensor& hidden);
  torch::Tensor head(const torch::Tensor& normed);
  torch::Tensor token_losses(const torch::Tensor& normed, const torch::Tensor& targets);
  std::vector<parallel::ParallelParameter> parallel_parameters() const;

 private:
  GPTOptions options_;
  TensorParallelContext tp_;
  Norm ln_f_{nullptr};
  parallel::VocabParallelEmbedding lm_head_{nullptr};  // untied output layer
  torch::Tensor wte_;  // the output layer's weight: the tied word embedding or lm_head's
  int64_t vocab_start_;
};
TORCH_MODULE(GPTOutputStage);

// The whole GPT, or one piece of it for a pipeline: virtual stage k of n holds
// blocks [k L / n, (k + 1) L / n), the input stage when k = 0 and the output
// stage when k = n - 1. A last piece that is not also the first holds its own
// copy of the word embedding (initialised like the first piece's, its
// gradient summed with it over the embedding group).
class GPTImpl : public LanguageModel {
 public:
  // Without a tp communicator the model is the plain, single-rank GPT.
  explicit GPTImpl(const GPTOptions& options, TensorParallelContext tp = {}, PipelinePosition position = {});
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& targets) override;
  // The whole model's logits over the whole vocabulary (its tp padding cut off), fp32,
  // the same on every tp rank: tokens [B, S] -> [B, S, vocab_size], by the training forward.
  torch::Tensor logits(const torch::Tensor& tokens);
  // The same for tokens [B, S] that continue the sequence CACHE holds (KVCache(num_layers,
  // positions), empty at first): only these S positions are computed, each attending to the
  // cached ones, whose keys and values it appends. Eval mode, a whole model (one pipeline
  // piece), no sequence parallelism; beyond model.seq_len positions it is refused.
  torch::Tensor forward_cached(const torch::Tensor& tokens, KVCache& cache);
  // Every parameter once, with its global name, in order of use in forward.
  std::vector<parallel::ParallelParameter> parallel_parameters() const override;
  std::vector<int64_t> activation_shape(int64_t micro_batch_size) const override;
  std::vector<torch::Tensor> tied_parameters() const override;
  std::vector<MoEStats*> moe_stats() override;
  torch::Tensor take_mtp_loss() override;
  BlockStackImpl* block_stack() override { return blocks.get(); }
  bool splits_sequences_over_cp() const override { return true; }
  bool recomputes_selectively() const override { return true; }  // (its attention, built with the config's recompute)
  // Parameters of this piece, each whole (unsplit by tp): the whole model's when it is one piece.
  int64_t num_parameters() const;

  GPTInputStage input{nullptr};  // first piece only
  BlockStack blocks{nullptr};
  GPTOutputStage output{nullptr};  // last piece only

 private:
  GPTOptions options_;
  TensorParallelContext tp_;
  PipelinePosition position_;
  parallel::VocabParallelEmbedding tied_wte_{nullptr};  // the last piece's copy, when it is not the first
  std::shared_ptr<MultiTokenPredictionImpl> mtp_;       // last piece, model.mtp.depth > 0
  torch::Tensor mtp_loss_sum_;                          // fp64: the MTP losses since take_mtp_loss
  // The word embedding this piece holds: the input stage's, or the last piece's copy.
  parallel::VocabParallelEmbedding word_embedding() const;
  std::shared_ptr<parallel::Communicator> own_tp_, own_ep_;  // groups of one when none was given
};
TORCH_MODULE(GPT);

// The factories `loom train` uses.
std::shared_ptr<LanguageModel> make_gpt(const Config& config, TensorParallelContext tp);
std::shared_ptr<LanguageModel> make_gpt_piece(const Config& config, TensorParallelContext tp,
                                              PipelinePosition position);

}  // namespace loom::models
