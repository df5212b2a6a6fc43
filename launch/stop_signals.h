// The signal a cluster scheduler sends before preemption (SIGTERM, or SLURM's
// --signal=USR1 warning), a user's Ctrl-C (SIGINT) or a closed terminal (SIGHUP,
// unless nohup ignores it): recorded, so that the step in flight finishes and is
// saved rather than the process dying mid-step.
#pragma once

namespace loom::launch {

void install_stop_handlers();
// The last stop signal received, 0 if none.
int stop_signal();

}  // namespace loom::launch
