#include "parallel/launch_env.h"

#include <c10/util/Exception.h>
#ifndef LOOM_WITHOUT_MPI
#include <mpi.h>
#endif
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "parallel/slurm_launch.h"

namespace loom::parallel {
namespace {

// MPI_Init and the collectives right after it have no timeout: a rank stopped while it starts
// (before its own MPI_Init returns) left the others waiting in theirs for ever, out of reach of
// parallel.timeout_s and the heartbeat, which start later. Nor has c10d's first exchange with the
// store it connects to: a port that accepts and never answers (rank 0 stopped once it listened,
// another program on MASTER_PORT) held every other rank for ever, under any launcher but mpirun.
// This ends the waiting rank after TIMEOUT (exit 1, a stuck peer's code), saying STEP and WHY; the
// launcher then ends the rest.
class StartupWatchdog {
 public:
  // SLACK: waited beyond TIMEOUT, for a library's own timeout (and its message) to come first.
  StartupWatchdog(std::chrono::milliseconds timeout, std::string step,
                  std::string why = "another rank of the job has not started (stopped, or too slow to start)",
                  std::chrono::milliseconds slack = std::chrono::milliseconds(0))
      : thread_([this, timeout, slack, step = std::move(step), why = std::move(why)] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (done_changed_.wait_for(lock, timeout + slack, [this] { return done_; })) return;
          std::fprintf(stderr,
                       "loom: error: %s did not finish within parallel.timeout_s = %.0f s: %s; ending this rank\n",
                       step.c_str(), std::chrono::duration<double>(timeout).count(), why.c_str());
          std::fflush(stderr);
          std::_Exit(1);
        }) {}
  StartupWatchdog(const StartupWatchdog&) = delete;
  StartupWatchdog& operator=(const StartupWatchdog&) = delete;
  ~StartupWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_changed_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

const char* env(const char* name) {
  return std::getenv(name);
}

int env_int(const char* name, int fallback) {
  const char* value = env(name);
  if (!value) return fallback;
  char* end = nullptr;
  errno = 0;
  long parsed = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || parsed < 0 || errno == ERANGE || parsed > std::numeric_limits<int>::max()) {
    throw InputError(std::string("environment variable ") + name + "='" + value +
                     "' is not a non-negative integer of at most " + std::to_string(std::numeric_limits<int>::max()));
  }
  return static_cast<int>(parsed);
}

#ifndef LOOM_WITHOUT_MPI
void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) throw CommError(std::string("MPI call failed during rendezvous: ") + what);
}

std::string host_name() {
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}
#endif

// The store at ADDRESS:PORT, served by this process when SERVE (port 0: one the kernel picks), or a
// CommError naming the rank and the address when it cannot be served or reached within TIMEOUT.
// c10d retries a refused connection past TIMEOUT (three times it, seen) and waits for a silent
// one's answer for ever: the watchdog holds it to TIMEOUT and a second.
c10d_compat::StorePtr open_store(const std::string& address, int port, bool serve, int rank, int world,
                                 std::chrono::milliseconds timeout) {
  const std::string where = address + (port ? ":" + std::to_string(port) : std::string());
  const StartupWatchdog watchdog(
      timeout,
      "rank " + std::to_string(rank) + (serve ? " serving" : " connecting to") + " the rendezvous store at " + where,
      serve ? "the other ranks did not all connect (not started, stopped, or given another MASTER_ADDR or MASTER_PORT)"
            : "nothing there answers as rank 0's store (rank 0 not started or stopped, another program holding "
              "MASTER_PORT, or a wrong MASTER_ADDR)",
      std::chrono::seconds(1));
  try {
    return c10d_compat::make_tcp_store(address, static_cast<uint16_t>(port), serve, world, timeout);
  } catch (const std::exception& e) {
    auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
    // Not a timeout but the user's port: the same on a rerun or a requeue (SLURM keeps the job id).
    if (serve && port && what.find("EADDRINUSE") != std::string::npos) {
      throw InputError("rank " + std::to_string(rank) + " could not serve the rendezvous store at " + where +
                       ": the port is in use on this host (EADDRINUSE: another job or program holds it); give "
                       "the job a free MASTER_PORT");
    }
    std::ostringstream s;
    s << "rank " << rank << " could not " << (serve ? "serve" : "connect to") << " the rendezvous store at " << address
      << (port ? ":" + std::to_string(port) : std::string()) << " within "
      << std::chrono::duration<double>(timeout).count() << " s (parallel.timeout_s): " << what;
    throw CommError(s.str());
  }
}

// Gloo writes to its peers with writev, which raises SIGPIPE when the peer's end was reset (a
// rank that died with bytes unread). SIGPIPE's default action ends the process at once with no
// message, so a survivor vanished instead of naming the dead rank, and the ranks still waiting
// took it for dead too. Ignored, the write fails with EPIPE and the collective with an error, as
// in every PyTorch job (Python ignores SIGPIPE). A handler the program installed is kept.
void ignore_broken_pipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

void end_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
#ifndef LOOM_WITHOUT_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

LaunchInfo detect_launch() {
  LaunchInfo info;
  if (env("OMPI_COMM_WORLD_SIZE")) {
    info.launcher = "mpirun";
    info.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    info.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    info.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    info.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", info.world);
  } else if (env("WORLD_SIZE")) {
    const bool agent =
        env("TORCHELASTIC_USE_AGENT_STORE") && std::string(env("TORCHELASTIC_USE_AGENT_STORE")) == "True";
    info.launcher = env("TORCHELASTIC_RUN_ID") ? "torchrun" : "env";
    info.rank = env_int("RANK", -1);
    info.world = env_int("WORLD_SIZE", 1);
    info.local_rank = env_int("LOCAL_RANK", 0);
    info.local_world = env_int("LOCAL_WORLD_SIZE", info.world);
    info.agent_store = agent;
    if (info.rank < 0) throw InputError("WORLD_SIZE is set but RANK is not");
    if (info.world > 1) {
      if (!env("MASTER_ADDR") || !env("MASTER_PORT")) {
        throw InputError("WORLD_SIZE=" + std::to_string(info.world) + " needs MASTER_ADDR and MASTER_PORT");
      }
      info.master_addr = env("MASTER_ADDR");
      info.master_port = env_int("MASTER_PORT", 0);
      if (info.master_port < 1 || info.master_port > 65535) {
        throw InputError("environment variable MASTER_PORT='" + std::string(env("MASTER_PORT")) +
                         "' is not a TCP port (1-65535)");
      }
    }
    // torchrun restarts workers with a new attempt number; keys of an old attempt must not be seen.
    info.store_prefix = "loom/attempt_" + std::to_string(env_int("TORCHELASTIC_RESTART_COUNT", 0)) + "/";
  } else if (started_by_srun(env)) {
    info = slurm_launch(env);
  } else if (env("RANK")) {
    // One of several processes whose WORLD_SIZE was left out would train alone, as a job of one.
    throw InputError(std::string("RANK=") + env("RANK") +
                     " is set but WORLD_SIZE is not: give every process of the job WORLD_SIZE (and MASTER_ADDR, "
                     "MASTER_PORT), or unset RANK to run one process");
  }
  if (info.world < 1) throw InputError("world size must be at least 1");
  if (info.rank >= info.world) {
    throw InputError("rank " + std::to_string(info.rank) + " is not below world size " + std::to_string(info.world));
  }
  return info;
}

bool first_attempt() {
  return env_int("TORCHELASTIC_RESTART_COUNT", 0) == 0 && env_int("SLURM_RESTART_COUNT", 0) == 0;
}

LaunchEnv::LaunchEnv(std::chrono::milliseconds timeout) : info_(detect_launch()), timeout_(timeout) {
  if (info_.world > 1) ignore_broken_pipe();
#ifdef LOOM_WITHOUT_MPI
  if (info_.launcher == "mpirun") {
    throw InputError(
        "this loom was built without MPI (LOOM_WITH_MPI=OFF), but mpirun started it "
        "(OMPI_COMM_WORLD_SIZE is set); launch with torchrun, or as one process");
  }
#else
  if (info_.launcher == "mpirun") {
    const StartupWatchdog watchdog(timeout, "MPI's start-up (MPI_Init and the store's address)");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      check_mpi(MPI_Init(nullptr, nullptr), "MPI_Init");
      mpi_initialized_ = true;
    }
    // Rank 0 serves the store on a port the kernel picks; MPI tells the others
    // where. Ranks that all share one host talk over loopback.
    const std::string host = host_name();
    std::vector<char> hosts(static_cast<size_t>(info_.world) * 256, 0);
    char mine[256] = {0};
    std::strncpy(mine, host.c_str(), 255);
    check_mpi(MPI_Allgather(mine, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, MPI_COMM_WORLD), "MPI_Allgather");
    bool one_host = true;
    for (int r = 0; r < info_.world; ++r) one_host = one_host && std::strcmp(&hosts[r * 256], mine) == 0;
    if (one_host) info_.local_world = info_.world;

    char address[256] = {0};
    int port = 0;
    if (info_.world > 1) {
      if (info_.rank == 0) {
        const std::string addr = env("MASTER_ADDR") ? env("MASTER_ADDR") : (one_host ? "127.0.0.1" : host);
        store_ = open_store(addr, env_int("MASTER_PORT", 0), true, 0, info_.world, timeout);
        port = c10d_compat::tcp_store_port(store_);
        std::strncpy(address, addr.c_str(), 255);
      }
      check_mpi(MPI_Bcast(address, 256, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
      check_mpi(MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
      if (info_.rank != 0) store_ = open_store(address, port, false, info_.rank, info_.world, timeout);
      info_.master_addr = address;
      info_.master_port = port;
    }
  } else
#endif
  if (info_.world > 1) {
    const bool serve = info_.rank == 0 && !info_.agent_store;
    store_ = open_store(info_.master_addr, info_.master_port, serve, info_.rank, info_.world, timeout);
  }
  if (store_) store_ = c10d_compat::prefix_store(info_.store_prefix, store_);
}

LaunchEnv::~LaunchEnv() {
  store_.reset();
#ifndef LOOM_WITHOUT_MPI
  // MPI_Finalize waits for every rank, so a rank leaving on an error must not call it: the error
  // reaches end_job, which aborts the job instead.
  if (mpi_initialized_ && std::uncaught_exceptions() == 0) MPI_Finalize();
#endif
}

std::function<c10d_compat::StorePtr()> LaunchEnv::store_reconnector() const {
  if (!store_) return {};
  return [address = info_.master_addr, port = info_.master_port, prefix = info_.store_prefix, world = info_.world,
          timeout = timeout_]() {
    return c10d_compat::prefix_store(
        prefix, c10d_compat::make_tcp_store(address, static_cast<uint16_t>(port), false, world, timeout));
  };
}

c10d_compat::StorePtr LaunchEnv::connect_store() const {
  if (!store_) return {};
  auto client = open_store(info_.master_addr, info_.master_port, false, info_.rank, info_.world, timeout_);
  return c10d_compat::prefix_store(info_.store_prefix, client);
}

}  // namespace loom::parallel
