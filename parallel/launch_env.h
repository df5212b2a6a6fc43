// How this process was started, and the rendezvous that follows from it.
//
//   plain     no launcher variables: world 1, no store.
//   mpirun    OMPI_COMM_WORLD_*: MPI is initialised; rank 0 serves a TCPStore on
//             a free port and broadcasts its address over MPI.
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. When
//             TORCHELASTIC_USE_AGENT_STORE is True the agent already serves the
//             TCPStore on MASTER_PORT, so every rank, rank 0 included, is a client.
//   env       the same variables without an agent: rank 0 serves the store.
//   slurm     an srun step: SLURM_PROCID, SLURM_NTASKS, ... (parallel/slurm_launch.h);
//             rank 0 serves the store.
//
// When several are set the innermost launcher wins: mpirun, then RANK/WORLD_SIZE, then
// SLURM. mpirun or torchrun inside an allocation inherit SLURM's variables, which then
// describe the launcher's own processes (one per node), not loom's ranks.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "parallel/c10d_compat.h"

namespace loom::parallel {

struct LaunchInfo {
  std::string launcher = "plain";
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;
  std::string store_prefix = "loom/";
};

// Reads the environment only, so a config can be checked against the world before any rank
// connects to another. Throws InputError naming the variable when it is inconsistent.
LaunchInfo detect_launch();

// False when a launcher is running the job again: TORCHELASTIC_RESTART_COUNT (torchrun
// --max_restarts) or SLURM_RESTART_COUNT (a requeued job) is above 0.
bool first_attempt();

// Ends this process with CODE at once, running no destructors (a thread may still wait on a peer
// that stopped). Once MPI is up it ends the whole job: MPI_Abort, after which mpirun kills every
// rank, stopped ones included, where MPI_Finalize would wait for each of them.
[[noreturn]] void end_job(int code);

// Owns the rendezvous store and, under mpirun, MPI's lifetime. With more than one rank it also
// ignores SIGPIPE, unless a handler is installed, so that a write to a dead peer fails the
// collective with an error rather than ending this process without a word.
class LaunchEnv {
 public:
  explicit LaunchEnv(std::chrono::milliseconds timeout);
  ~LaunchEnv();
  LaunchEnv(const LaunchEnv&) = delete;
  LaunchEnv& operator=(const LaunchEnv&) = delete;

  const LaunchInfo& info() const { return info_; }
  int rank() const { return info_.rank; }
  int world() const { return info_.world; }
  bool single_host() const { return info_.local_world == info_.world; }
  // Null when world is 1.
  const c10d_compat::StorePtr& store() const { return store_; }
  // Another connection to the same store, under the same prefix, for a thread of its own: c10d
  // serialises one connection's operations, so a long wait on it would hold up the thread.
  // Null when world is 1.
  c10d_compat::StorePtr connect_store() const;
  // Makes a new connection of the same kind, throwing c10d's error where it cannot within
  // parallel.timeout_s, with no watchdog ending the process: for a connection that broke while
  // training goes on (the heartbeat's). Holds copies of what it needs: it may outlive this object.
  std::function<c10d_compat::StorePtr()> store_reconnector() const;
  // The rank whose process serves the store; -1 when the torchrun agent does.
  int store_server_rank() const { return info_.agent_store ? -1 : 0; }

 private:
  LaunchInfo info_;
  c10d_compat::StorePtr store_;
  std::chrono::milliseconds timeout_;
  bool mpi_initialized_ = false;
};

}  // namespace loom::parallel
