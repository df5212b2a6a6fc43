// A user's model with the most common tensor-parallel mistake, for `verify` to catch
// (tests/scripts/custom_model.sh): its output layer is tied to the vocab-parallel embedding and
// reads the replicated hidden state without copy_to_tp_region, so under tp each rank's backward
// holds only its own vocabulary slice's part of that state's gradient, and everything below the
// output layer trains on a partial gradient. At tp 1 the region is the identity, and the model is
// the right one: one process cannot tell; the losses drift only slowly at tp 2.
//
//   tokens -> VocabParallelEmbedding -> ColumnParallelLinear -> GELU -> RowParallelLinear (+ residual)
//          -> logits against the embedding (tied) -> vocab-parallel cross-entropy
//
// With FORGOTTEN_REGION=0 in the environment it calls copy_to_tp_region, as it should.
#include <launch/commands.h>
#include <models/language_model.h>
#include <parallel/tensor_parallel.h>
#include <parallel/tp_regions.h>

#include <cstdlib>
#include <cstring>

using namespace loom;

class TiedMlpModel : public models::LanguageModel {
 public:
  TiedMlpModel(const Config& config, models::TensorParallelContext tp) : tp_(*tp.tp) {
    const int64_t h = config.model.hidden_size, f = config.ffn_size(), v = config.model.vocab_size;
    const auto seed = static_cast<uint64_t>(config.train.seed);
    vocab_size_ = v;
    const char* forgotten = std::getenv("FORGOTTEN_REGION");
    forgotten_ = forgotten == nullptr || std::strcmp(forgotten, "0") != 0;
    embedding_ = register_module("embedding",
                                 parallel::VocabParallelEmbedding(
                                     parallel::VocabParallelEmbeddingOptions(v, h).name("embedding").seed(seed), tp_));
    up_ = register_module(
        "up", parallel::ColumnParallelLinear(parallel::ColumnParallelLinearOptions(h, f).name("up").seed(seed), tp_));
    down_ = register_module(
        "down", parallel::RowParallelLinear(
                    parallel::RowParallelLinearOptions(f, h).name("down").seed(seed).input_is_parallel(true), tp_));
  }

  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets) override {
    auto x = embedding_->forward(tokens);
    x = x + down_->forward(torch::gelu(up_->forward(x), "tanh"));
    auto hidden = forgotten_ ? x : parallel::copy_to_tp_region(x, tp_);
    auto logits = torch::linear(hidden, embedding_->weight);  // [B, S, V / tp]
    return parallel::vocab_parallel_cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}),
                                                  embedding_->vocab_start(), vocab_size_, tp_)
        .mean();
  }

 private:
  parallel::Communicator& tp_;
  int64_t vocab_size_ = 0;
  bool forgotten_ = true;
  parallel::VocabParallelEmbedding embedding_{nullptr};
  parallel::ColumnParallelLinear up_{nullptr};
  parallel::RowParallelLinear down_{nullptr};
};

int main(int argc, char** argv) {
  return launch::train_main(argc, argv, [](const Config& config, models::TensorParallelContext tp) {
    return std::make_shared<TiedMlpModel>(config, tp);
  });
}
