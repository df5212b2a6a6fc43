// Where a run writes: rank 0 chooses the directory (--run-dir, else
// runs/CONFIG-STAMP), locks it and checkpoint.dir against a second job
// (launch/directory_lock.h) and refuses a fresh run where it would replace
// another run's records (metrics.jsonl, checkpoints) -- writing nothing else
// there: the trainer writes config.yaml and metrics.jsonl once start-up has
// passed. The other ranks learn the directory, or rank 0's refusal, through
// the rendezvous store.
#pragma once

#include <string>

#include "core/config.h"
#include "launch/commands.h"
#include "launch/directory_lock.h"
#include "parallel/launch_env.h"

namespace loom::launch {

// The first line of the config.yaml a run writes into its run directory: what tells it from a
// user's own file there, which a fresh run refuses to replace.
inline constexpr const char* kRunConfigHeader = "# loom: this run's resolved config (written by loom train)";

struct RunDirectory {
  std::string path;
  DirectoryLock run_lock, checkpoint_lock;  // held by rank 0 for the run's lifetime
};

// Collective over the launch's ranks: every rank throws rank 0's InputError alike.
RunDirectory agree_on_run_dir(const TrainArgs& args, const Config& config, const parallel::LaunchEnv& env);

}  // namespace loom::launch
