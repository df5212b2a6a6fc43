// A custom model trained by loom's trainer: an MLP language model that reads
// the current and the previous token. It is built only from loom's public
// parallel layers, so it runs at any tensor-parallel size:
//
//   tokens -> VocabParallelEmbedding (current and previous token, concatenated)
//          -> ColumnParallelLinear -> GELU -> RowParallelLinear (+ residual)
//          -> logits against the embedding (tied) -> vocab-parallel cross-entropy
//
// Usage, like `loom train`:  mlp_language_model CONFIG.yaml [--set k=v]... [--run-dir DIR]
// It uses model.hidden_size, model.ffn_hidden_size and model.vocab_size.
#include <launch/commands.h>
#include <models/language_model.h>
#include <parallel/tensor_parallel.h>
#include <parallel/tp_regions.h>

using namespace loom;

class MlpLanguageModel : public models::LanguageModel {
 public:
  MlpLanguageModel(const Config& config, models::TensorParallelContext tp) : tp_(*tp.tp) {
    const int64_t h = config.model.hidden_size, f = config.ffn_size(), v = config.model.vocab_size;
    const auto seed = static_cast<uint64_t>(config.train.seed);
    vocab_size_ = v;
    embedding_ = register_module(
        "embedding", parallel::VocabParallelEmbedding(
                         parallel::VocabParallelEmbeddingOptions(v, h).name("embedding").seed(seed), tp_));
    up_ = register_module("up", parallel::ColumnParallelLinear(
                                    parallel::ColumnParallelLinearOptions(2 * h, f).name("up").seed(seed), tp_));
    down_ = register_module("down", parallel::RowParallelLinear(parallel::RowParallelLinearOptions(f, h)
                                                                    .name("down")
                                                                    .seed(seed)
                                                                    .input_is_parallel(true),
                                                                tp_));
  }

  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets) override {
    auto current = embedding_->forward(tokens);                        // [B, S, H]
    auto previous = torch::constant_pad_nd(current, {0, 0, 1, 0}).narrow(1, 0, tokens.size(1));
    auto x = current + down_->forward(torch::gelu(up_->forward(torch::cat({current, previous}, -1)), "tanh"));
    auto logits = torch::linear(parallel::copy_to_tp_region(x, tp_), embedding_->weight);  // [B, S, V / tp]
    return parallel::vocab_parallel_cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}),
                                                  embedding_->vocab_start(), vocab_size_, tp_)
        .mean();
  }

 private:
  parallel::Communicator& tp_;
  int64_t vocab_size_ = 0;
  parallel::VocabParallelEmbedding embedding_{nullptr};
  parallel::ColumnParallelLinear up_{nullptr};
  parallel::RowParallelLinear down_{nullptr};
};

int main(int argc, char** argv) {
  return launch::train_main(argc, argv, [](const Config& config, models::TensorParallelContext tp) {
    return std::make_shared<MlpLanguageModel>(config, tp);
  });
}
