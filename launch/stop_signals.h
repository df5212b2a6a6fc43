// The signal a cluster scheduler sends before preemption (SIGTERM, or SLURM's
// --signal=USR1 warning), a user's Ctrl-C (SIGINT) or a closed terminal (SIGHUP,
// unless nohup ignores it): recorded, so that the step in flight finishes and is
// saved rather than the process dying mid-step.
#pragma once

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

}  // namespace loom::launch
