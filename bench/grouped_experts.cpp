// The experts' grouped product against a loop of per-expert products (models/grouped_linear.h):
// forward and backward of one SwiGLU MoE layer's experts (gate, up, proj) on tokens routed evenly
// or skewed, one thread, median of the timed repetitions. Prints a line per case and the ratio.
//   build/bench/loom_bench_grouped_experts [--hidden 512] [--width 256] [--experts 32] [--top-k 4]
//                                          [--tokens 1024] [--reps 10] [--threads 1]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "models/grouped_linear.h"
#include "models/swiglu.h"

namespace {

using loom::bench::int_arg;

// Seconds for one forward and backward of the experts, median over REPS after one warm-up.
template <typename Linear>
double time_experts(Linear linear, const torch::Tensor& x, const std::vector<torch::Tensor>& gate,
                    const std::vector<torch::Tensor>& up, const std::vector<torch::Tensor>& proj, int64_t reps) {
  std::vector<double> seconds;
  for (int64_t r = 0; r <= reps; ++r) {
    for (auto* ws : {&gate, &up, &proj})
      for (auto& w : *ws) w.mutable_grad() = torch::Tensor();
    const auto start = std::chrono::steady_clock::now();
    auto hidden = loom::models::swiglu(linear(x, gate), linear(x, up));
    linear(hidden, proj).sum().backward();
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    if (r > 0) seconds.push_back(d.count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t h = int_arg(argc, argv, "--hidden", 512), f = int_arg(argc, argv, "--width", 256);
  const int64_t experts = int_arg(argc, argv, "--experts", 32), top_k = int_arg(argc, argv, "--top-k", 4);
  const int64_t tokens = int_arg(argc, argv, "--tokens", 1024), reps = int_arg(argc, argv, "--reps", 10);
  torch::set_num_threads(static_cast<int>(int_arg(argc, argv, "--threads", 1)));
  torch::manual_seed(0);
  auto weights = [&](int64_t out, int64_t in) {
    std::vector<torch::Tensor> ws;
    for (int64_t e = 0; e < experts; ++e) ws.push_back((torch::randn({out, in}) * 0.02).requires_grad_(true));
    return ws;
  };
  auto gate = weights(f, h), up = weights(f, h), proj = weights(h, f);
  auto grouped = [](const std::vector<int64_t>& rows) {
    return [rows](const torch::Tensor& x, const std::vector<torch::Tensor>& ws) {
      return loom::models::grouped_linear(x, ws, {}, rows);
    };
  };
  auto loop = [](const std::vector<int64_t>& rows) {
    return [rows](const torch::Tensor& x, const std::vector<torch::Tensor>& ws) {
      auto blocks = x.split_with_sizes(rows, 0);
      std::vector<torch::Tensor> out;
      for (size_t e = 0; e < ws.size(); ++e) out.push_back(torch::linear(blocks[e], ws[e]));
      return torch::cat(out, 0);
    };
  };
  std::printf(
      "experts' forward + backward: hidden %lld, width %lld, %lld experts, top %lld, %lld tokens, %d thread(s)\n",
      static_cast<long long>(h), static_cast<long long>(f), static_cast<long long>(experts),
      static_cast<long long>(top_k), static_cast<long long>(tokens), torch::get_num_threads());
  const int64_t routed = tokens * top_k;
  for (const std::string routing : {"even", "skewed"}) {
    std::vector<int64_t> rows(experts, routed / experts);
    if (routing == "skewed") {  // half the routed tokens on one expert, a few experts idle
      std::fill(rows.begin(), rows.end(), routed / 2 / (experts - 4));
      rows[0] = routed - (experts - 5) * rows[1];
      for (int64_t e = experts - 4; e < experts; ++e) rows[e] = 0;
    }
    int64_t total = 0;
    for (auto r : rows) total += r;
    auto x = torch::randn({total, h}).requires_grad_(true);
    const double g = time_experts(grouped(rows), x, gate, up, proj, reps);
    const double l = time_experts(loop(rows), x, gate, up, proj, reps);
    std::printf("%-6s routing: grouped %.2f ms, per-expert loop %.2f ms, loop / grouped %.2fx\n", routing.c_str(),
                g * 1e3, l * 1e3, l / g);
  }
  return 0;
}
