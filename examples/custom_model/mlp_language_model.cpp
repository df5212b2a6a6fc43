// A custom model trained by loom's trainer: an MLP language model that reads
// the current and the previous token. It is built only from loom's public
// parallel layers, so it runs at any tensor-parallel size:
//
//   tokens -> VocabParallelEmbedding (current and previous token, concatenated)
//          -> ColumnParallelLinear -> GELU -> RowParallelLinear (+ residual)
//          -> model.num_layers residual MLP blocks (the same shape), declared as a BlockStack
//          -> logits against the embedding (tied) -> vocab-parallel cross-entropy
//
// Declaring the blocks is all it does for ZeRO-3 and recomputation: the trainer
// gathers each block's parameters around it (parallel.zero_stage 3) and reruns it
// in backward (train.recompute full) from outside.
//
// Usage, like `loom train`:  mlp_language_model CONFIG.yaml [--set k=v]... [--run-dir DIR]
// and like `loom verify` (a layout against one process): mlp_language_model verify CONFIG.yaml [--set k=v]...
// It uses model.hidden_size, model.ffn_hidden_size, model.num_layers and model.vocab_size.
#include <launch/commands.h>
#include <models/block_stack.h>
#include <models/language_model.h>
#include <parallel/tensor_parallel.h>
#include <parallel/tp_regions.h>

using namespace loom;

// x + down(gelu(up(x))), tensor parallel: up splits the features, down sums them back.
class ResidualMlp : public models::BlockModule {
 public:
  ResidualMlp(const std::string& name, int64_t h, int64_t f, uint64_t seed, parallel::Communicator& tp) {
    up_ = register_module("up", parallel::ColumnParallelLinear(
                                    parallel::ColumnParallelLinearOptions(h, f).name(name + ".up").seed(seed), tp));
    down_ = register_module(
        "down",
        parallel::RowParallelLinear(
            parallel::RowParallelLinearOptions(f, h).name(name + ".down").seed(seed).input_is_parallel(true), tp));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    return x + down_->forward(torch::gelu(up_->forward(x), "tanh"));
  }

 private:
  parallel::ColumnParallelLinear up_{nullptr};
  parallel::RowParallelLinear down_{nullptr};
};

class MlpLanguageModel : public models::LanguageModel {
 public:
  MlpLanguageModel(const Config& config, models::TensorParallelContext tp) : tp_(*tp.tp) {
    const int64_t h = config.model.hidden_size, f = config.ffn_size(), v = config.model.vocab_size;
    const auto seed = static_cast<uint64_t>(config.train.seed);
    vocab_size_ = v;
    embedding_ = register_module("embedding",
                                 parallel::VocabParallelEmbedding(
                                     parallel::VocabParallelEmbeddingOptions(v, h).name("embedding").seed(seed), tp_));
    up_ = register_module("up", parallel::ColumnParallelLinear(
                                    parallel::ColumnParallelLinearOptions(2 * h, f).name("up").seed(seed), tp_));
    down_ = register_module(
        "down", parallel::RowParallelLinear(
                    parallel::RowParallelLinearOptions(f, h).name("down").seed(seed).input_is_parallel(true), tp_));
    blocks_ = register_module("blocks", models::BlockStack());
    for (int64_t i = 0; i < config.model.num_layers; ++i) {
      blocks_->push_back(std::make_shared<ResidualMlp>("blocks." + std::to_string(i), h, f, seed, tp_));
    }
  }

  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets) override {
    auto current = embedding_->forward(tokens);  // [B, S, H]
    auto previous = torch::constant_pad_nd(current, {0, 0, 1, 0}).narrow(1, 0, tokens.size(1));
    auto x = current + down_->forward(torch::gelu(up_->forward(torch::cat({current, previous}, -1)), "tanh"));
    x = blocks_->forward(x);
    auto logits = torch::linear(parallel::copy_to_tp_region(x, tp_), embedding_->weight);  // [B, S, V / tp]
    return parallel::vocab_parallel_cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}),
                                                  embedding_->vocab_start(), vocab_size_, tp_)
        .mean();
  }

  models::BlockStackImpl* block_stack() override { return blocks_.get(); }

 private:
  parallel::Communicator& tp_;
  int64_t vocab_size_ = 0;
  parallel::VocabParallelEmbedding embedding_{nullptr};
  parallel::ColumnParallelLinear up_{nullptr};
  parallel::RowParallelLinear down_{nullptr};
  models::BlockStack blocks_{nullptr};
};

int main(int argc, char** argv) {
  return launch::train_main(argc, argv, [](const Config& config, models::TensorParallelContext tp) {
    return std::make_shared<MlpLanguageModel>(config, tp);
  });
}
