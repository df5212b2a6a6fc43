#include "launch/blas_environment.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/errors.h"
#include "parallel/launch_env.h"

namespace loom::launch {
namespace {

constexpr const char* kSpinVariable = "OPENBLAS_THREAD_TIMEOUT";
constexpr const char* kShortestSpin = "4";  // OpenBLAS's floor: 2^4 cycles

// Ranks on this host, counted as the trainer counts them (parallel/launch_env.h); 1 when the
// environment is inconsistent, which the (restarted) trainer then reports.
int local_ranks() {
  try {
    return std::max(1, parallel::detect_launch().local_world);
  } catch (const InputError&) {
    return 1;
  }
}

}  // namespace

void restart_with_short_blas_spin(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "train") != 0) return;
  if (std::getenv(kSpinVariable) != nullptr) return;
  if (dlsym(RTLD_DEFAULT, "openblas_set_num_threads") == nullptr) return;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (cores / local_ranks() <= 1) return;  // one thread per rank: OpenBLAS starts no pool to spin
  if (setenv(kSpinVariable, kShortestSpin, 0) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv(kSpinVariable);  // execv failed: carry on in this process, as it was
}

std::string blas_spin_setting() {
  if (dlsym(RTLD_DEFAULT, "openblas_set_num_threads") == nullptr) return "";
  const char* value = std::getenv(kSpinVariable);
  return value ? std::string(kSpinVariable) + "=" + value : std::string("OpenBLAS's default spin");
}

int apply_thread_policy(const Config& config, const parallel::LaunchInfo& launch) {
  int threads = static_cast<int>(config.train.threads_per_rank);
  if (threads == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, launch.local_world));
  }
  using SetThreads = void (*)(int);
  if (auto openblas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    openblas(threads);
    at::set_num_threads(1);
  } else {
    at::set_num_threads(threads);
  }
  return threads;
}

}  // namespace loom::launch
