#include "launch/blas_environment.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace loom::launch {
namespace {

constexpr const char* kSpinVariable = "OPENBLAS_THREAD_TIMEOUT";
constexpr const char* kShortestSpin = "4";  // OpenBLAS's floor: 2^4 cycles

// Ranks on this host, as the launchers say (mpirun, torchrun); 1 when run directly.
int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  }
  return 1;
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

}  // namespace loom::launch
