// OpenBLAS's threads spin after each product, yielding the core, for about
// 2^28 cycles (0.1 s) before they sleep. loom lends those cores to its own
// pieces of work between products (core/blas_threads.h: attention head by
// head, the GELU), which then share each core with a spinning thread: on the
// benchmark GPT that costs more than the pieces gain. OpenBLAS reads its spin
// time (OPENBLAS_THREAD_TIMEOUT, 2^N cycles) once, when it is loaded, so
// `loom train` sets it to the shortest (4) and starts itself again, when
// OpenBLAS is loaded, the variable is unset and each rank has more than one
// core. Measured in bench/README.md. A user's own setting is left alone.
#pragma once

#include <string>

#include "core/config.h"
#include "parallel/launch_env.h"

namespace loom::launch {

// Returns only if no restart was needed or the restart failed (then loom runs as it is).
void restart_with_short_blas_spin(int argc, char** argv);

// For the startup line: "OPENBLAS_THREAD_TIMEOUT=N", "OpenBLAS's default spin", or "" without OpenBLAS.
std::string blas_spin_setting();

// OpenBLAS keeps its own thread pool beside LibTorch's OpenMP one, and the two
// together oversubscribe the cores. Measured on 2 cores (README, "Threads"): the
// matrix products dominate, so BLAS gets the rank's threads (train.threads_per_rank,
// 0: cores / local ranks) and LibTorch's elementwise ops run on one. Returns the
// rank's thread count.
int apply_thread_policy(const Config& config, const parallel::LaunchInfo& launch);

}  // namespace loom::launch
