// The signal a cluster scheduler sends before preemption (SIGTERM, or SLURM's
// --signal=USR1 warning), a user's Ctrl-C (SIGINT) or a closed terminal (SIGHUP,
// unless nohup ignores it): recorded, so that the step in flight finishes and is
// saved rather than the process dying mid-step.
#pragma once

#include <string>

namespace loom::launch {

void install_stop_handlers();
// The last stop signal received, 0 if none.
int stop_signal();

// From the start of the process (the loom executable calls it before any library initialises,
// launch/main.cpp) until release_held_stop_signals: SIGTERM and SIGINT, where their action is the
// default, are recorded instead of ending the process, and unblocked. A rank still starting when a
// launcher stops the job (srun --kill-on-bad-exit after another rank's config error) then reaches
// its own verdict: an input error exits 2 (die() ignores them) rather than dying by the signal.
void hold_stop_signals();
// Gives the held signals their default action back and, if one came meanwhile, dies by it as it
// would have then. Called once the command has checked its input (train: before it connects to
// its peers); nothing when nothing is held.
void release_held_stop_signals();

// Releases the held signals when CONFIG_PATH is no regular file: reading a named pipe waits for its
// writer however long, and that wait must stay stoppable (Ctrl-C, a launcher's SIGTERM).
void release_held_stop_signals_before_reading(const std::string& config_path);

// Under torchrun: a SIGTERM when the agent that started this rank dies (killed, out of memory, or
// by a signal it leaves at its default action, SIGUSR1 among them), so that the rank saves and
// stops as on a scheduler's SIGTERM (or, without checkpoint.dir, ends) instead of training on with
// no launcher, beside a restarted job's ranks. Called at the start with hold_stop_signals, given the
// process's ENVIRONMENT; the other launchers end their ranks themselves (mpirun's daemons, slurmstepd).
void stop_with_torchrun_agent(char** environment);
// Whether this rank's torchrun agent has died since the start.
bool torchrun_agent_gone();
// Whether this rank was started by a torchrun agent that is still alive: one that restarts it when
// it fails (--max_restarts), and takes its exit 0 for a finished job.
bool torchrun_agent_alive();

}  // namespace loom::launch
