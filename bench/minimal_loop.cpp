// The floor for loom's own machinery: the same GPT, AdamW, clipping and thread
// settings as `loom train` at tp = pp = dp = 1, written as the shortest plain
// LibTorch loop (torch::nn modules, torch::optim::AdamW), with none of loom's
// parallel layers, buckets, schedules, metrics or checkpoints. Prints one
// JSON line like bench/reference_gpt.py.
//
// With --loom-kernels 1 the loop uses the kernels loom uses (LibTorch's fused
// attention, loom's GELU cut at fixed places, loom's fused AdamW) instead of
// the textbook ops: against that, what is left between it and `loom train` is
// the framework.
#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/gelu.h"
#include "optim/adamw.h"

namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t hidden, int64_t heads, int64_t seq_len, bool loom_kernels)
      : heads(heads),
        loom_kernels(loom_kernels),
        ln_1(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        qkv(register_module("qkv", torch::nn::Linear(hidden, 3 * hidden))),
        proj(register_module("proj", torch::nn::Linear(hidden, hidden))),
        ln_2(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        fc(register_module("fc", torch::nn::Linear(hidden, 4 * hidden))),
        fc_proj(register_module("fc_proj", torch::nn::Linear(4 * hidden, hidden))),
        mask(register_buffer("mask", torch::ones({seq_len, seq_len}, torch::kBool).triu(1))) {}

  torch::Tensor forward(torch::Tensor x) {
    if (loom_kernels) {
      const int64_t b = x.size(0), s = x.size(1), h = x.size(2), d = h / heads;
      auto parts = qkv(ln_1(x)).view({b, s, heads, 3, d}).permute({3, 0, 2, 1, 4});
      auto context = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
      x = x + proj(context.transpose(1, 2).reshape({b, s, h}));
      return x + fc_proj(loom::models::gelu_tanh(fc(ln_2(x))));
    }
    const int64_t b = x.size(0), s = x.size(1), h = x.size(2), d = h / heads;
    auto qkv_out = qkv(ln_1(x)).view({b, s, heads, 3, d}).permute({3, 0, 2, 1, 4});
    auto scores = torch::matmul(qkv_out[0], qkv_out[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    auto probs = torch::softmax(scores.masked_fill(mask, -INFINITY), -1);
    x = x + proj(torch::matmul(probs, qkv_out[2]).transpose(1, 2).reshape({b, s, h}));
    return x + fc_proj(torch::gelu(fc(ln_2(x)), "tanh"));
  }

  int64_t heads;
  bool loom_kernels;
  torch::nn::LayerNorm ln_1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln_2;
  torch::nn::Linear fc, fc_proj;
  torch::Tensor mask;
};
TORCH_MODULE(Block);

struct GPTImpl : torch::nn::Module {
  GPTImpl(int64_t vocab, int64_t seq_len, int64_t hidden, int64_t heads, int64_t layers, bool loom_kernels)
      : wte(register_module("wte", torch::nn::Embedding(vocab, hidden))),
        wpe(register_parameter("wpe", torch::zeros({seq_len, hidden}))),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))) {
    for (int64_t i = 0; i < layers; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), Block(hidden, heads, seq_len, loom_kernels)));
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) {
      if (p.dim() >= 2) p.normal_(0.0, 0.02);
    }
  }
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets) {
    auto x = wte(tokens) + wpe.narrow(0, 0, tokens.size(1));
    for (auto& block : blocks) x = block(x);
    auto logits = torch::matmul(ln_f(x), wte->weight.t());
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
  }
  torch::nn::Embedding wte;
  torch::Tensor wpe;
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f;
};
TORCH_MODULE(GPT);

int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t layers = flag(argc, argv, "layers", 6), hidden = flag(argc, argv, "hidden", 384),
                heads = flag(argc, argv, "heads", 6), seq_len = flag(argc, argv, "seq-len", 256),
                vocab = flag(argc, argv, "vocab", 256), batch = flag(argc, argv, "global-batch", 8),
                steps = flag(argc, argv, "steps", 20), warmup = flag(argc, argv, "warmup-steps", 5),
                threads = flag(argc, argv, "threads", 1);
  const bool loom_kernels = flag(argc, argv, "loom-kernels", 0) != 0;
  // The thread policy loom uses (README, "Threads"): one pool, MKL's and LibTorch's.
  at::set_num_threads(static_cast<int>(threads));
  // And loom's allocator setting (core/cpu_memory.h, keep_freed_memory), so
  // that the difference left is loom's machinery.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
  torch::manual_seed(1234);
  GPT model(vocab, seq_len, hidden, heads, layers, loom_kernels);
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW optimizer(groups, torch::optim::AdamWOptions(3e-4));
  // loom's AdamW decays the same matrices (dim >= 2) with the same betas.
  loom::optim::AdamW fused(model->parameters(), {0.9, 0.95, 1e-8, 0.1});
  std::vector<double> rates;
  for (int64_t step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    auto data = torch::randint(vocab, {batch, seq_len + 1}, torch::kInt64);
    if (loom_kernels) {
      fused.zero_grad();
    } else {
      optimizer.zero_grad();
    }
    auto loss = model->forward(data.narrow(1, 0, seq_len), data.narrow(1, 1, seq_len));
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    const double lr = 3e-4 * (step < 2 ? (step + 1) / 2.0 : 0.1 + 0.45 * (1 + std::cos(M_PI * step / steps)));
    if (loom_kernels) {
      fused.step(lr);
    } else {
      for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      optimizer.step();
    }
    loss.item<float>();
    rates.push_back(static_cast<double>(batch * seq_len) /
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::vector<double> timed(rates.begin() + std::min<int64_t>(warmup, steps - 1), rates.end());
  std::nth_element(timed.begin(), timed.begin() + static_cast<long>(timed.size() / 2), timed.end());
  std::printf("{\"side\": \"minimal-libtorch\", \"loom_kernels\": %s, \"world\": 1, \"median_tokens_per_s\": %.1f}\n",
              loom_kernels ? "true" : "false", timed[timed.size() / 2]);
  return 0;
}
