// Errors carry their context (key, file, rank, group, op); the command-line
// boundary turns them into an exit code and one clear message.
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace loom {

// Bad input from the user: config, arguments, data. Exit code 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The run diverged: train.max_skipped_steps steps in a row had a non-finite loss or gradient norm. Exit code 3.
struct DivergenceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The machine failed the run, not the user: a full disk, a file system error. Exit code 75
// (EX_TEMPFAIL), which a scheduler may requeue (SLURM's RequeueExit) and never reads as bad input.
struct EnvironmentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A collective failed or timed out: a dead, stuck or diverged peer. Exit code 1.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whether a file system call that failed with the errno ERROR failed because of the machine (a
// full disk, inode table or quota, a file system remounted read-only, failing, stale or gone: an
// NFS handle, a FUSE mount's transport; EnvironmentError, exit 75, so a requeue on a mended or
// another node may succeed) rather than because of the path the user gave or their limits (no
// such file or directory, no permission, a name too long, too many open files for ulimit -n:
// InputError, exit 2, the same on every node).
inline bool machine_file_error(int error) {
  switch (error) {
    case 0:  // no errno to go by: as before, the path's
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case EACCES:
    case EPERM:
    case ENAMETOOLONG:
    case ELOOP:
    case EEXIST:
    case EINVAL:
    case EMFILE: return false;
    default: return true;
  }
}

// MESSAGE as the error its ERROR (an errno) calls for.
[[noreturn]] inline void throw_file_error(int error, const std::string& message) {
  if (machine_file_error(error)) throw EnvironmentError(message);
  throw InputError(message);
}

// A write through a stream that failed: errno (cleared before the stream was opened) says why and
// whose fault; the machine's when it says nothing (a stream may fail without a system call).
[[noreturn]] inline void throw_write_error(const std::string& message) {
  const int error = errno;
  if (error == 0) throw EnvironmentError(message + " (disk full?)");
  throw_file_error(error, message + ": " + std::strerror(error));
}

}  // namespace loom
