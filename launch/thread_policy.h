// The rank's threads. The torch wheel's BLAS (MKL), LibTorch's own ops and
// loom's pieces of work (core/cpu_threads.h) share one OpenMP pool per
// process; each rank gets its share of the host's cores so that the ranks
// on a host do not oversubscribe them (README, "Threads").
#pragma once

#include "core/config.h"
#include "parallel/launch_env.h"

namespace loom::launch {

// Sets the pool to train.threads_per_rank, or (0) the host's cores divided by its ranks,
// at least 1. Returns the count.
int apply_thread_policy(const Config& config, const parallel::LaunchInfo& launch);

}  // namespace loom::launch
