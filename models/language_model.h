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
#include "parallel/communicator.h"
#include "parallel/parallel_parameter.h"
#include "parallel/tp_rng.h"

namespace loom::models {

// What a model's pieces share about tensor parallelism.
struct TensorParallelContext {
  parallel::Communicator* tp = nullptr;
  bool sequence_parallel = false;
  // Draws the dropout masks of tp-split regions; null: the default generator.
  parallel::TensorParallelRng* rng = nullptr;
};

class LanguageModel : public torch::nn::Module {
 public:
  // tokens, targets [B, S] int64 -> the mean cross-entropy over the B*S targets (a scalar).
  virtual torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets) = 0;
  // Every parameter once, with its global name (the same at every layout).
  virtual std::vector<parallel::ParallelParameter> parallel_parameters() const = 0;
};

// Builds this rank's part of a model for a resolved config.
using ModelFactory = std::function<std::shared_ptr<LanguageModel>(const Config&, TensorParallelContext)>;

}  // namespace loom::models
