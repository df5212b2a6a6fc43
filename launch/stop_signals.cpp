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
}

int stop_signal() {
  return g_stop_signal.load();
}

}  // namespace loom::launch
