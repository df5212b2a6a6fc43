// Tensor-parallel layers in the manner of Megatron-LM, shaped like torch::nn
// modules: options structs with chained setters and TORCH_MODULE holders.
//
// Every layer draws its full weight from (seed, name) and keeps its slice, so
// a layer at tp=4 holds exactly rows/columns of the tp=1 layer's weight.
//
//   ColumnParallelLinear   Y = X A^T + b with A's rows (output features) split:
//                          rank r computes Y[..., r-th slice]. gather_output
//                          all-gathers the full Y.
//   RowParallelLinear      A's columns (input features) split: rank r computes
//                          X_r A_r^T, the partial sums are all-reduced (or
//                          reduce-scattered along the sequence with SP), and
//                          the bias is added once, after the reduction.
//   VocabParallelEmbedding the vocabulary's rows split; tokens outside a rank's
//                          rows embed to zero and the all-reduce fills them in.
//   vocab_parallel_cross_entropy
//                          cross-entropy over vocabulary-split logits without
//                          gathering them: the max, the sum of exponentials
//                          and the target logit are reduced over tp.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/parallel_module.h"
#include "parallel/parallel_parameter.h"

namespace loom::parallel {

struct ColumnParallelLinearOptions {
  ColumnParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  // All-gather the output so every rank holds all output features.
  TORCH_ARG(bool, gather_output) = false;
  // The input is split along the sequence (dim 1) and is all-gathered first.
  TORCH_ARG(bool, sequence_parallel) = false;
  // The weight's global name ("NAME.weight", "NAME.bias") and its init.
  TORCH_ARG(std::string, name) = "linear";
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(double, init_std) = 0.02;
};

class ColumnParallelLinearImpl : public ParallelModule {
 public:
  ColumnParallelLinearImpl(ColumnParallelLinearOptions options, Communicator& tp);
  torch::Tensor forward(const torch::Tensor& input);
  // For an input the caller already entered into the tp region (enter_column_parallel_region):
  // several column-parallel layers reading one input (SwiGLU's gate and up, GQA's q and kv)
  // then share one all-reduce or all-gather instead of one each.
  torch::Tensor forward_entered(const torch::Tensor& entered);
  std::vector<ParallelParameter> parallel_parameters() const;

  ColumnParallelLinearOptions options;
  torch::Tensor weight;  // [out_features / tp, in_features]
  torch::Tensor bias;    // [out_features / tp], undefined without bias

 private:
  Communicator* tp_;
};
TORCH_MODULE(ColumnParallelLinear);

// What ColumnParallelLinear does to its input first: copy_to_tp_region (identity forward,
// all-reduce backward), or gather_from_sequence_region under sequence parallelism.
torch::Tensor enter_column_parallel_region(const torch::Tensor& input, Communicator& tp, bool sequence_parallel);

struct RowParallelLinearOptions {
  RowParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  // The input already holds this rank's slice of the features (a column-parallel output).
  TORCH_ARG(bool, input_is_parallel) = false;
  // Reduce-scatter the output along the sequence instead of all-reducing it.
  TORCH_ARG(bool, sequence_parallel) = false;
  TORCH_ARG(std::string, name) = "linear";
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(double, init_std) = 0.02;
};

class RowParallelLinearImpl : public ParallelModule {
 public:
  RowParallelLinearImpl(RowParallelLinearOptions options, Communicator& tp);
  torch::Tensor forward(const torch::Tensor& input);
  std::vector<ParallelParameter> parallel_parameters() const;

  RowParallelLinearOptions options;
  torch::Tensor weight;  // [out_features, in_features / tp]
  torch::Tensor bias;    // [out_features], replicated

 private:
  Communicator* tp_;
};
TORCH_MODULE(RowParallelLinear);

struct VocabParallelEmbeddingOptions {
  VocabParallelEmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  TORCH_ARG(int64_t, num_embeddings);
  TORCH_ARG(int64_t, embedding_dim);
  // Reduce-scatter the output along the sequence instead of all-reducing it.
  TORCH_ARG(bool, sequence_parallel) = false;
  TORCH_ARG(std::string, name) = "embedding";
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(double, init_std) = 0.02;
};

class VocabParallelEmbeddingImpl : public ParallelModule {
 public:
  VocabParallelEmbeddingImpl(VocabParallelEmbeddingOptions options, Communicator& tp);
  // tokens [B, S] -> [B, S, H] (or [B, S / tp, H] with sequence_parallel)
  torch::Tensor forward(const torch::Tensor& tokens);
  std::vector<ParallelParameter> parallel_parameters() const;

  // The vocabulary is padded up to a multiple of tp with zero rows whose logits never win.
  int64_t padded_vocab() const { return padded_vocab_; }
  int64_t vocab_start() const { return vocab_start_; }

  VocabParallelEmbeddingOptions options;
  torch::Tensor weight;  // [padded_vocab / tp, embedding_dim]

 private:
  Communicator* tp_;
  int64_t padded_vocab_, vocab_start_;
};
TORCH_MODULE(VocabParallelEmbedding);

// Per-token cross-entropy [N] of logits split by vocabulary: LOGITS [N, V_local]
// holds columns [vocab_start, vocab_start + V_local) of the padded vocabulary;
// columns at or past VOCAB_SIZE are padding and never win. Computed in fp32 (or fp64) whatever
// the logits' dtype. A target of -100 (PyTorch's ignore_index) gives 0 and no gradient, as a
// model's loss then reads them: the mean over every target, ignored ones counted as 0.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           int64_t vocab_start, int64_t vocab_size, Communicator& tp);

}  // namespace loom::parallel
