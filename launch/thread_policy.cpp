#include "launch/thread_policy.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <thread>

namespace loom::launch {

int apply_thread_policy(const Config& config, const parallel::LaunchInfo& launch) {
  int threads = static_cast<int>(config.train.threads_per_rank);
  if (threads == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, launch.local_world));
  }
  at::set_num_threads(threads);
  return threads;
}

}  // namespace loom::launch
