// Every rank of a job trains the same config. Under a plain launch (or a launcher that starts
// each rank with its own command line) nothing else makes sure of it: a different hidden_size
// crashed inside Gloo, a different train.lr or seed trained silently different replicas. At
// rendezvous each rank publishes its resolved config; each compares every other rank's with
// rank 0's and all refuse alike (exit 2), naming the keys and the ranks that differ. A node's own
// settings (train.threads_per_rank, train.peak_tflops, train.device) may differ.
#pragma once

#include "core/config.h"
#include "parallel/launch_env.h"

namespace loom::launch {

// Collective over the launch's ranks (nothing at world 1). Throws InputError on every rank when
// any rank's resolved config, or whether it was given --resume (RESUMING), differs from rank 0's.
void agree_on_config(const Config& config, bool resuming, const parallel::LaunchEnv& env);

}  // namespace loom::launch
