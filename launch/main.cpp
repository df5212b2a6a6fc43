#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "launch/commands.h"
#include "launch/stop_signals.h"

namespace {

void hold_stop_signals_at_start(int, char**, char** environment) {
  loom::launch::hold_stop_signals();
  loom::launch::stop_with_torchrun_agent(environment);
}

}  // namespace

// The executable's .preinit_array runs before any shared library's initialisers, LibTorch's among
// them (most of a rank's start-up): a launcher's SIGTERM from then on is held until the command
// has judged its input (launch/stop_signals.h).
__attribute__((section(".preinit_array"),
               used)) static void (*const g_hold_stop_signals)(int, char**, char**) = hold_stop_signals_at_start;

int main(int argc, char** argv) {
  const int code = loom::launch::run_cli(argc, argv);
  // Leaves without the static destructors: LibTorch's unregister its thousands of operators one by
  // one, about a third of a short command's time (`loom --version`: 0.13 of 0.38 s), paid by every
  // rank of every job. Everything loom writes is closed by then; only the streams need flushing.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
  return code;  // LeakSanitizer checks at the exit _Exit would skip
#else
  std::_Exit(code);
#endif
}
