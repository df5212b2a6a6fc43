#include "launch/stop_signals.h"

#include <atomic>
#include <csignal>

namespace loom::launch {
namespace {

// A handler can only reach a variable with static storage; nothing else in loom is global.
std::atomic<int> g_stop_signal{0};

extern "C" void record_stop_signal(int signal) {
  g_stop_signal.store(signal);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  // SLURM's warning before a time limit (sbatch --signal=USR1@SECONDS, which mpirun passes on to
  // the ranks) and a closed terminal: saved and stopped too, where their default ends the process
  // with nothing saved. Only where nothing else chose their action: nohup ignores SIGHUP, and
  // that run must go on.
  for (int signal : {SIGUSR1, SIGHUP}) {
    struct sigaction current {};
    if (sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) sigaction(signal, &action, nullptr);
  }
}

int stop_signal() {
  return g_stop_signal.load();
}

}  // namespace loom::launch
