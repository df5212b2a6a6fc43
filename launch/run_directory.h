// Where a run writes: rank 0 chooses the directory (--run-dir, else
// runs/CONFIG-STAMP), creates it with config.yaml and an empty metrics.jsonl,
// and the other ranks learn it through the rendezvous store.
#pragma once

#include <string>

#include "core/config.h"
#include "launch/commands.h"
#include "parallel/launch_env.h"

namespace loom::launch {

// Collective over the launch's ranks.
std::string agree_on_run_dir(const TrainArgs& args, const Config& config, const parallel::LaunchEnv& env);

}  // namespace loom::launch
