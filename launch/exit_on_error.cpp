#include "launch/exit_on_error.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <new>
#include <system_error>
#include <thread>

#include "core/error_text.h"
#include "core/errors.h"
#include "parallel/launch_env.h"

namespace loom::launch {
namespace {

// The ranks of a job write into one log (mpirun's, srun's, torchrun's): a rank of several names
// itself after its message, so that the one whose data or disk failed mid-run is known.
std::string rank_of_several() {
  try {
    const auto launch = parallel::detect_launch();
    if (launch.world > 1) return " (rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.world) + ")";
  } catch (const std::exception&) {  // the launcher's variables are what failed: no rank to name
  }
  return "";
}

// Leaves without running destructors: after a failed collective, communicator threads may still
// wait on a dead peer, and joining them would hang the exit. Under mpirun it ends the whole job, so
// that no rank waits on this one. A rank that has its verdict leaves with it: srun --kill-on-bad-exit
// sends SIGTERM to the ranks still exiting once the first has gone, which would turn their exit 3
// into 143.
// "loom: error: MESSAGE\n", the rank after its first line, where the error is said (advice may follow
// on lines of its own).
std::string error_text(const std::string& message) {
  std::string text = "loom: error: " + without_json_exception_ids(message);
  text.insert(std::min(text.find('\n'), text.size()), rank_of_several());
  return text + "\n";
}

[[noreturn]] void die(int code, const std::string& message) {
  for (int signal : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) std::signal(signal, SIG_IGN);
  std::cout.flush();
  std::fputs(error_text(message).c_str(), stderr);
  std::fflush(stderr);
  parallel::end_job(code);
}

}  // namespace

bool is_host_out_of_memory(const std::string& message) {
  return message.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
         message.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
}

std::string out_of_memory_text(const std::string& torch_message) {
  // Exit 1, not 75: the same job requeued would run out again. Not 2 either: the config is valid,
  // and the memory check (train.memory_check) is an estimate.
  return "out of memory: " + torch_message +
         "\nThis rank's share of the weights, gradients, optimizer state and activations did not fit. A rank "
         "needs less with a smaller train.micro_batch_size, train.recompute selective or full, a higher "
         "parallel.zero_stage, or more tp, pp or ep ranks ('loom plan' ranks the layouts by memory); "
         "train.memory_check (on by default) estimates this before the first step";
}

void end_process_now(int code, const std::string& message) {
  const std::string text = error_text(message);
  auto written = std::make_shared<std::promise<void>>();
  auto done = written->get_future();
  try {
    std::thread([text, written] {
      for (size_t at = 0; at < text.size();) {
        const ssize_t n = ::write(STDERR_FILENO, text.data() + at, text.size() - at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        at += static_cast<size_t>(n);
      }
      written->set_value();
    }).detach();
    done.wait_for(std::chrono::seconds(2));
  } catch (const std::exception&) {  // no thread to be had: the exit still matters more than the words
  }
  std::_Exit(code);
}

int exit_on_error(const std::function<int()>& body) {
  try {
    return body();
  } catch (const InputError& e) {
    die(2, e.what());
  } catch (const DivergenceError& e) {
    die(3, e.what());
  } catch (const EnvironmentError& e) {
    die(75, e.what());
  } catch (const std::filesystem::filesystem_error& e) {  // whose fault, by its errno (core/errors.h)
    die(machine_file_error(e.code().value()) ? 75 : 2, e.what());
  } catch (const c10::OutOfMemoryError& e) {  // a GPU's allocator
    die(1, out_of_memory_text(e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    die(1, is_host_out_of_memory(message) ? out_of_memory_text(message) : message);
  } catch (const std::system_error& e) {  // a thread the process could not start: its memory or thread limit
    const bool resources =
        e.code() == std::errc::resource_unavailable_try_again || e.code() == std::errc::not_enough_memory;
    die(1, resources ? out_of_memory_text(std::string("could not start a thread (") + e.what() + ")") : e.what());
  } catch (const std::bad_alloc& e) {  // loom's own containers
    die(1, out_of_memory_text(std::string("an allocation failed (") + e.what() + ")"));
  } catch (const std::exception& e) {
    die(1, e.what());
  }
}

}  // namespace loom::launch
