// Errors carry their context (key, file, rank, group, op); the command-line
// boundary turns them into an exit code and one clear message.
#pragma once

#include <stdexcept>
#include <string>

namespace loom {

// Bad input from the user: config, arguments, data. Exit code 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The run diverged: train.max_skipped_steps steps in a row had a non-finite loss or gradient norm. Exit code 3.
struct DivergenceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The machine failed the run, not the user: a full disk, a file system error. Exit code 75
// (EX_TEMPFAIL), which a scheduler may requeue (SLURM's RequeueExit) and never reads as bad input.
struct EnvironmentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A collective failed or timed out: a dead, stuck or diverged peer. Exit code 1.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace loom
