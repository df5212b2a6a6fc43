// What loom's trainer needs of a model, so that users can hand it their own:
// a torch::nn::Module whose forward gives the mean loss of a batch of token
// sequences and which lists its parameters with their global names and how
// they are split across tensor parallelism. Build one from loom's parallel
// layers (parallel/tensor_parallel.h); examples/custom_model shows how.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "core/config.h"
#include "models/block_stack.h"
#include "parallel/communicator.h"
#include "parallel/parallel_module.h"
#include "parallel/parallel_parameter.h"
#include "parallel/tp_rng.h"

namespace loom::models {

// What a model's pieces share about tensor parallelism.
struct TensorParallelContext {
  parallel::Communicator* tp = nullptr;
  bool sequence_parallel = false;
  // Draws the dropout masks of tp-split regions; null: the default generator.
  parallel::TensorParallelRng* rng = nullptr;
  // The expert-parallel group MoE layers spread their experts over; null: all experts on this rank.
  parallel::Communicator* ep = nullptr;
  // Context parallelism: the group each sequence is split over (null or size 1: none), and how its
  // attention talks (parallel/ring_attention.h, parallel/all_to_all_attention.h).
  parallel::Communicator* cp = nullptr;
  ContextComm cp_comm = ContextComm::p2p;

  int64_t cp_size() const { return cp ? cp->size() : 1; }
  // The global positions of this rank's tokens of a sequence of SEQ_LEN (int64 on DEVICE).
  torch::Tensor cp_positions(int64_t seq_len, const torch::Device& device) const;
};

struct MoEStats;

// Which piece of a pipelined model to build: virtual stage INDEX of COUNT
// (pp * virtual_stages). Virtual stage k runs on pipeline stage k mod pp.
struct PipelinePosition {
  int64_t index = 0;
  int64_t count = 1;
  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
  bool whole() const { return count == 1; }
};

class LanguageModel : public torch::nn::Module {
 public:
  // tokens, targets [B, S] int64 -> the mean cross-entropy over the B*S targets (a scalar). A
  // target of -100 (data.eod_mask_loss's) counts as 0 in that mean, as vocab_parallel_cross_entropy(...).mean()
  // gives it: the trainer rescales to the mean over the targets left (core/loss_mask.h).
  // A pipeline piece maps its INPUT (tokens on the first piece, the previous
  // piece's activations otherwise) to activations, or to the loss on the last piece.
  virtual torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& targets) = 0;
  // Every parameter once, with its global name (the same at every layout): by
  // default as the parallel layers described them when they created them
  // (parallel/parallel_module.h); a parameter none described is refused by name.
  virtual std::vector<parallel::ParallelParameter> parallel_parameters() const {
    return parallel::collect_parallel_parameters(*this);
  }

  // For pipelines: the shape of the activations a non-last piece returns for a
  // micro-batch of MICRO_BATCH_SIZE sequences, known before any data flows.
  virtual std::vector<int64_t> activation_shape(int64_t micro_batch_size) const {
    (void)micro_batch_size;
    TORCH_CHECK(false, "this model does not declare its activation shape, so it cannot be pipelined");
  }
  // Parameters this piece shares with another pipeline stage (GPT's tied word
  // embedding on the first and last stage): their gradients are summed over
  // the embedding group so that the copies stay equal.
  virtual std::vector<torch::Tensor> tied_parameters() const { return {}; }
  // The statistics of this piece's MoE layers (parallel/moe.h), which the
  // trainer gathers and resets every step; none for a dense model.
  virtual std::vector<MoEStats*> moe_stats() { return {}; }
  // DeepSeek-V3's multi-token prediction loss (before its weight) summed over the training
  // micro-batches since the last call, fp64 on the model's device; undefined for a model without it.
  virtual torch::Tensor take_mtp_loss() { return {}; }
  // The model's repeated blocks, if it declares them (models/block_stack.h): the
  // trainer wraps each from outside (ZeRO-3 units, full recomputation). A model
  // without them trains with its parameters in one ZeRO-3 unit and no full recomputation.
  virtual BlockStackImpl* block_stack() { return nullptr; }
  // Whether the model splits each sequence over the context-parallel group itself
  // (TensorParallelContext::cp): its attention exchanges keys and values there
  // (parallel/ring_attention.h) and its positions are cp_positions. One that does
  // not would see only its rank's part of each sequence: parallel.cp > 1 refuses it.
  virtual bool splits_sequences_over_cp() const { return false; }
  // Whether train.recompute: selective recomputes anything here: the model's attention re-runs its
  // core in backward (models/self_attention.h does, built with Recompute::selective; a model's own
  // attention may, with parallel::recompute_in_backward). One that does not is refused it.
  virtual bool recomputes_selectively() const { return false; }
};

// LOSS, the last piece's forward: refused (InputError) unless it is the one number the trainer averages.
const torch::Tensor& require_scalar_loss(const torch::Tensor& loss);

// Refuses (InputError naming the key) a layout MODEL cannot train as asked: parallel.cp > 1 for a model that
// does not split sequences over a context-parallel group, train.recompute: full for one that declares no
// blocks to recompute, selective for one whose attention recomputes nothing (either would keep every
// activation without a word).
void require_layout_support(const LanguageModel& model, int64_t cp, Recompute recompute);

// Builds this rank's part of a model for a resolved config.
using ModelFactory = std::function<std::shared_ptr<LanguageModel>(const Config&, TensorParallelContext)>;
// Builds one piece of a pipelined model; a piece at PipelinePosition{0, 1} is the whole model.
using PipelineModelFactory =
    std::function<std::shared_ptr<LanguageModel>(const Config&, TensorParallelContext, PipelinePosition)>;

// A factory for a model that cannot be split into pipeline stages: it builds
// the whole model and refuses parallel.pp or virtual_stages above 1 (exit 2).
PipelineModelFactory whole_model_only(ModelFactory make_model);

}  // namespace loom::models
