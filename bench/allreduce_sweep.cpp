// The backend's all-reduce measured over message sizes, through loom's own
// communicator (so what the trainer gets): the median time of each size, and
// time = alpha + beta * bytes fitted by least squares, as in the alpha-beta
// model; also the bus bandwidth 2 (P - 1) / P * bytes / time of the largest.
// Run under mpirun or torchrun; rank 0 prints one JSON line.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "parallel/gloo_communicator.h"
#include "parallel/launch_env.h"
#include "parallel/process_groups.h"

using namespace loom::parallel;

int main() {
  at::set_num_threads(1);
  LaunchEnv env(std::chrono::seconds(120));
  auto stats = std::make_shared<CommStats>();
  RankGrid grid(ParallelSizes{1, 1, env.world(), 1});
  ProcessGroups groups(grid, env.rank(),
                       make_gloo_factory(env.store(), env.single_host(), stats, std::chrono::seconds(120)), stats);
  auto& comm = groups.world_comm();
  const int repeats = 10, warmup = 2;
  std::vector<double> sizes, times;
  for (int64_t bytes = 4096; bytes <= 16 * 1024 * 1024; bytes *= 4) {
    auto t = torch::ones({bytes / 4});
    std::vector<double> samples;
    for (int i = 0; i < warmup + repeats; ++i) {
      comm.barrier().wait();
      const auto start = std::chrono::steady_clock::now();
      comm.all_reduce(t).wait();
      if (i >= warmup)
        samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(samples.begin(), samples.begin() + repeats / 2, samples.end());
    sizes.push_back(static_cast<double>(bytes));
    times.push_back(samples[repeats / 2]);
  }
  // Least squares of time on bytes.
  const double n = static_cast<double>(sizes.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sx += sizes[i], sy += times[i], sxx += sizes[i] * sizes[i], sxy += sizes[i] * times[i];
  }
  const double beta = (n * sxy - sx * sy) / (n * sxx - sx * sx), alpha = (sy - beta * sx) / n;
  if (env.rank() == 0) {
    const double p = static_cast<double>(env.world());
    std::printf(
        "{\"side\": \"allreduce\", \"backend\": \"%s\", \"world\": %lld, \"alpha_us\": %.1f, "
        "\"beta_s_per_byte\": %.4g, \"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f, \"sizes\": [",
        comm.backend().c_str(), static_cast<long long>(env.world()), alpha * 1e6, beta, 1e-9 / beta,
        2.0 * (p - 1.0) / p * sizes.back() / times.back() * 1e-9);
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::printf("%s[%.0f, %.6g]", i ? ", " : "", sizes[i], times[i]);
    }
    std::printf("]}\n");
  }
  return 0;
}
