// One job per directory. Two jobs writing one run directory interleave their
// metrics, and two writing one checkpoint directory delete each other's
// checkpoints, so a job holds a lock file in each: DIR/.loom-NAME.lock,
// holding the host, pid, boot and start time of its owner, who holds flock on
// it while the job runs. A second job is refused (exit 2) naming the holder. A
// lock left by a process that died -- one that no process holds the kernel lock
// on (a dead holder's is released, in whatever container it ran), or, where the
// file system has no flock, whose pid is gone or now another process's or of an
// earlier boot of this host; or of the same scheduler job (a restart by torchrun
// or SLURM) -- is taken over with a warning.
#pragma once

#include <string>

namespace loom::launch {

// A file-system error where a job starts (its run directory, checkpoint.dir, their locks): as
// throw_file_error (core/errors.h), except that a read-only file system is taken as the path the
// user chose (a dataset's mount, say), not a failing machine: exit 2 rather than a requeue that
// meets it again.
[[noreturn]] void throw_start_file_error(int error, const std::string& message);

// The scheduler job this process belongs to ("slurm:JOBID", "torchelastic:RUN_ID"), "" when none: a
// restart of the same job may take over the lock of an attempt that died on another host, and
// continues what its earlier attempts saved (launch/resume_choice.h).
std::string scheduler_job();

class DirectoryLock {
 public:
  DirectoryLock() = default;
  // Takes DIR's lock NAME, or throws InputError naming the holder. WHAT names the directory in messages ("run
  // directory").
  DirectoryLock(const std::string& dir, const std::string& name, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  void release();
  std::string path_;  // empty: holds nothing
  int fd_ = -1;       // the lock file, flock-ed while this job runs
};

}  // namespace loom::launch
