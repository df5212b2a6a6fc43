// DeepSeek-V3's multi-token prediction (model.mtp): DEPTH modules on the last pipeline piece. Module k
// (1-based) takes, at each position i, the previous module's hidden state (the main model's final
// normed one for k = 1) and the embedding of token i + k, each RMS-normalised (hnorm, enorm),
// joined and projected back to the hidden size (eh_proj), through one transformer block (global
// layer num_layers + k - 1, an MoE block where the model's rule says so), normalised again and
// turned into logits by the main model's output layer: its loss is the cross-entropy of token
// i + k + 1 over the positions that have one. The modules share the main model's word embedding
// and output layer, as DeepSeek-V3 does. Training adds the mean of their losses times
// model.mtp.loss_weight to the main loss.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "models/gpt.h"
#include "models/latent_attention.h"
#include "models/norm.h"

namespace loom::models {

// LOSS in forward; in backward LOSS's gradient flows into EXTRA too: EXTRA joins the loss that is
// trained without changing the one that is reported.
torch::Tensor add_in_backward(const torch::Tensor& loss, const torch::Tensor& extra);

class MultiTokenPredictionImpl : public torch::nn::Module {
 public:
  MultiTokenPredictionImpl(const GPTOptions& options, TensorParallelContext tp, const RotaryEmbedding& rotary);

  // tokens [B, S] -> their word embeddings as the input stage gives them ([B, S / tp, H] under SP).
  using Embed = std::function<torch::Tensor(const torch::Tensor& tokens)>;
  // A normed hidden state and targets [B, S] -> each position's cross-entropy [B S] (fp32).
  using TokenLosses = std::function<torch::Tensor(const torch::Tensor& normed, const torch::Tensor& targets)>;
  // NORMED: the main model's final normed hidden state; TARGETS [B, S]: token i + 1 at i -> the mean
  // over the modules of each one's mean cross-entropy.
  torch::Tensor forward(const torch::Tensor& normed, const torch::Tensor& targets, const Embed& embed,
                        const TokenLosses& token_losses);
  std::vector<MoEStats*> moe_stats();

 private:
  struct Module {
    Norm enorm{nullptr}, hnorm{nullptr}, norm{nullptr};
    ReplicatedLinear eh_proj{nullptr};
    GPTBlock block{nullptr};
  };
  // The targets of the whole sequence [B, S] and this rank's global positions [S / cp] (context
  // parallelism: the tokens after a chunk's last ones live on other cp ranks).
  std::pair<torch::Tensor, torch::Tensor> whole_sequence(const torch::Tensor& targets);

  TensorParallelContext tp_;
  int64_t seq_len_;
  torch::Tensor positions_, gather_order_;  // on the targets' device, made on first use
  std::vector<Module> modules_;
};
TORCH_MODULE(MultiTokenPrediction);

}  // namespace loom::models
