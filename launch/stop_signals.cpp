#include "launch/stop_signals.h"

#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace loom::launch {
namespace {

// A handler can only reach a variable with static storage; nothing else in loom is global.
std::atomic<int> g_stop_signal{0};
// The signals hold_stop_signals took over, as bits (1 << signal), until released.
std::atomic<unsigned> g_held{0};
// The torchrun agent this rank started under (its parent), 0 under any other launch.
std::atomic<pid_t> g_agent{0};

extern "C" void record_stop_signal(int signal) {
  g_stop_signal.store(signal);
}

// The signals held at start-up.
constexpr int kHeldSignals[] = {SIGTERM, SIGINT};

// An action that records the signal, with FLAGS.
struct sigaction recording(int flags) {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = flags;
  return action;
}

}  // namespace

void install_stop_handlers() {
  // A write or a read in flight when the signal comes (a checkpoint's file, a socket) goes on
  // rather than fail with EINTR: the step finishes and is saved as usual.
  const struct sigaction action = recording(SA_RESTART);
  // The scheduler's stop (scancel, preemption), always: a SIGTERM ignored would end in the SIGKILL
  // that follows it, with nothing saved.
  sigaction(SIGTERM, &action, nullptr);
  // A Ctrl-C, SLURM's warning before a time limit (sbatch --signal=USR1@SECONDS, which mpirun
  // passes on to the ranks) and a closed terminal: saved and stopped, where their default ends the
  // process with nothing saved. Only where nothing else chose their action: nohup ignores SIGHUP, a
  // script's background job SIGINT (so that a Ctrl-C meant for the script's foreground command
  // leaves it alone), and those runs must go on.
  for (int signal : {SIGINT, SIGUSR1, SIGHUP}) {
    struct sigaction current {};
    if (sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) sigaction(signal, &action, nullptr);
  }
}

int stop_signal() {
  return g_stop_signal.load();
}

// Only async-signal-safe calls and no allocation: it runs before libstdc++ and LibTorch are set up.
void hold_stop_signals() {
  // A start-up's slow system call in flight (a read, a library's set-up) goes on rather than fail
  // with EINTR: the signal is only held.
  const struct sigaction action = recording(SA_RESTART);
  sigset_t unblock;
  sigemptyset(&unblock);
  unsigned held = 0;
  for (int signal : kHeldSignals) {
    // An ignored SIGINT (a background job of a script) stays ignored.
    struct sigaction current {};
    if (sigaction(signal, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
    sigaction(signal, &action, nullptr);
    sigaddset(&unblock, signal);
    held |= 1u << signal;
  }
  g_held.store(held);
  // One sent before this process began and held pending by the launcher's mask comes in now.
  sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
}

void release_held_stop_signals_before_reading(const std::string& config_path) {
  struct stat status {};
  if (stat(config_path.c_str(), &status) == 0 && !S_ISREG(status.st_mode)) release_held_stop_signals();
}

void stop_with_torchrun_agent(char** environment) {
  // getenv cannot be used yet: the C library sets `environ` after the executable's preinit functions.
  bool torchrun = false;
  for (char** entry = environment; entry != nullptr && *entry != nullptr && !torchrun; ++entry) {
    torchrun = std::strncmp(*entry, "TORCHELASTIC_RUN_ID=", 20) == 0;
  }
  if (!torchrun) return;
  const pid_t agent = getppid();
  // The agent forks its ranks from its main thread, which lives as long as the agent does: the
  // signal comes when the agent dies, not when some thread of it ends.
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return;
  g_agent.store(agent);
  if (getppid() != agent) raise(SIGTERM);  // it died before the request took hold
}

bool torchrun_agent_gone() {
  const pid_t agent = g_agent.load();
  if (agent == 0) return false;
  if (getppid() != agent) return true;
  // The signal comes as the agent's main thread exits; the rank is handed to its other threads,
  // still ending, so that for a moment the agent is still the parent, a zombie or on its way out.
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(agent));
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) return true;
  char line[512] = {};
  const bool read = std::fgets(line, sizeof(line), file) != nullptr;
  std::fclose(file);
  const char* name_end = read ? std::strrchr(line, ')') : nullptr;  // the name may hold ')'
  return name_end != nullptr && (name_end[1] == ' ') && (name_end[2] == 'Z' || name_end[2] == 'X');
}

bool torchrun_agent_alive() {
  return g_agent.load() != 0 && !torchrun_agent_gone();
}

void release_held_stop_signals() {
  const unsigned held = g_held.exchange(0);
  if (held == 0) return;
  for (int signal : kHeldSignals) {
    if ((held & (1u << signal)) != 0) std::signal(signal, SIG_DFL);
  }
  if (const int signal = g_stop_signal.exchange(0); signal != 0) {
    std::fflush(nullptr);
    std::raise(signal);
  }
}

}  // namespace loom::launch
