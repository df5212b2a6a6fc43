// The pieces of a MoE training step that loom writes itself on the CPU, each against what it
// replaced, forward and backward, one thread, the two interleaved rep by rep (the machine's speed
// drifts more between runs than these differ), median of REPS:
//   RMSNorm (models/rms_norm_cpu.h) against at::rms_norm's composition, of the hidden states
//   [tokens, hidden] and of the per-head q/k norms [tokens x heads, 64];
//   SwiGLU of the fused gate-up product (swiglu_halves) against two halves' views;
//   the experts' weights read where AdamW's flat buffer holds them against a stacked copy.
//   build/bench/loom_bench_moe_pieces [--tokens 2048] [--hidden 256] [--width 128] [--experts 32]
//                                     [--top-k 4] [--reps 30]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/bench_args.h"
#include "models/grouped_linear.h"
#include "models/rms_norm_cpu.h"
#include "models/swiglu.h"
#include "optim/adamw.h"

namespace {

using loom::bench::int_arg;

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
  return d.count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times A and B (each a forward and backward) alternately, REPS each after a warm-up of each.
void compare(const char* what, const std::function<void()>& a, const std::function<void()>& b, int64_t reps) {
  std::vector<double> ta, tb;
  a(), b();
  for (int64_t r = 0; r < reps; ++r) ta.push_back(seconds_of(a)), tb.push_back(seconds_of(b));
  const double ma = median(ta) * 1e3, mb = median(tb) * 1e3;
  std::printf("%-58s loom %8.3f ms, before %8.3f ms, before / loom %.2fx\n", what, ma, mb, mb / ma);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = int_arg(argc, argv, "--tokens", 2048), h = int_arg(argc, argv, "--hidden", 256);
  const int64_t f = int_arg(argc, argv, "--width", 128), experts = int_arg(argc, argv, "--experts", 32);
  const int64_t top_k = int_arg(argc, argv, "--top-k", 4), reps = int_arg(argc, argv, "--reps", 30);
  torch::set_num_threads(1);
  torch::manual_seed(0);

  for (auto [rows, width] : {std::pair<int64_t, int64_t>{tokens, h}, {tokens * (h / 64), 64}}) {
    auto x = torch::randn({rows, width}).requires_grad_(true), w = torch::ones({width}).requires_grad_(true);
    auto grad = torch::randn({rows, width});
    auto run = [&](bool own) {
      return [&, own] {
        x.mutable_grad() = torch::Tensor(), w.mutable_grad() = torch::Tensor();
        (own ? loom::models::rms_norm_cpu(x, w, 1e-6) : at::rms_norm(x, {width}, w, 1e-6)).backward(grad);
      };
    };
    char what[96];
    std::snprintf(what, sizeof what, "RMSNorm of [%lld, %lld]", static_cast<long long>(rows),
                  static_cast<long long>(width));
    compare(what, run(true), run(false), reps);
  }

  const int64_t routed = tokens * top_k;
  {
    auto both = torch::randn({routed, 2 * f}).requires_grad_(true);
    auto grad = torch::randn({routed, f});
    auto halves = [&] {
      both.mutable_grad() = torch::Tensor();
      loom::models::swiglu_halves(both).backward(grad);
    };
    auto views = [&] {
      both.mutable_grad() = torch::Tensor();
      loom::models::swiglu(both.narrow(1, 0, f), both.narrow(1, f, f)).backward(grad);
    };
    char what[96];
    std::snprintf(what, sizeof what, "SwiGLU of the gate-up product [%lld, %lld]", static_cast<long long>(routed),
                  static_cast<long long>(2 * f));
    compare(what, halves, views, reps);
  }

  {
    // One MoE layer's experts as the model registers them (gate, up, proj per expert), in AdamW's
    // flat buffer, and the same values each owning its storage; tokens routed evenly.
    std::vector<torch::Tensor> gate, up, proj, params;
    for (int64_t e = 0; e < experts; ++e) {
      gate.push_back((torch::randn({f, h}) * 0.02).requires_grad_(true));
      up.push_back((torch::randn({f, h}) * 0.02).requires_grad_(true));
      proj.push_back((torch::randn({h, f}) * 0.02).requires_grad_(true));
      params.insert(params.end(), {gate.back(), up.back(), proj.back()});
    }
    std::vector<torch::Tensor> gate_apart, up_apart, proj_apart;
    for (auto [from, to] : {std::pair{&gate, &gate_apart}, {&up, &up_apart}, {&proj, &proj_apart}})
      for (const auto& w : *from) to->push_back(w.detach().clone().requires_grad_(true));
    loom::optim::AdamW adamw(params, {});
    const std::vector<int64_t> rows(static_cast<size_t>(experts), routed / experts);
    auto x = torch::randn({routed / experts * experts, h});
    auto experts_pass = [&](std::vector<torch::Tensor>& g, std::vector<torch::Tensor>& u,
                            std::vector<torch::Tensor>& p) {
      return [&] {
        for (auto* ws : {&g, &u, &p})
          for (auto& w : *ws) w.mutable_grad() = torch::Tensor();
        auto hidden = loom::models::swiglu_halves(loom::models::grouped_linear_kinds(x, {g, u}, rows));
        loom::models::grouped_linear(hidden, p, {}, rows).sum().backward();
      };
    };
    char what[96];
    std::snprintf(what, sizeof what, "experts (%lld of %lld x %lld), weights in place", static_cast<long long>(experts),
                  static_cast<long long>(f), static_cast<long long>(h));
    compare(what, experts_pass(gate, up, proj), experts_pass(gate_apart, up_apart, proj_apart), reps);
  }
  return 0;
}
