#include "launch/directory_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/errors.h"
#include "core/logging.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// Which attempt of that job this is: SLURM's restarts of the job, then torchrun's of its workers
// (torchrun inside an srun step restarts within one SLURM attempt), as one increasing number.
int64_t scheduler_attempt() {
  const auto count = [](const char* name) -> int64_t {
    const char* value = std::getenv(name);
    return value && *value ? std::atoll(value) : 0;
  };
  return count("SLURM_RESTART_COUNT") * 1000000 + count("TORCHELASTIC_RESTART_COUNT");
}

// When process PID started, in clock ticks since the machine booted (/proc/PID/stat's 22nd field),
// or empty when it is not running or cannot be read. With the boot's id it tells a process from a
// later one given the same pid: after a reboot, or in a new container, where loom is often pid 1.
std::string start_time(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto name_end = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (name_end == std::string::npos) return "";
  std::istringstream fields(stat.substr(name_end + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  in >> id;
  return id;
}

nlohmann::json this_process() {
  const auto pid = static_cast<int64_t>(::getpid());
  return {{"host", host_name()},    {"pid", pid},
          {"job", scheduler_job()}, {"attempt", scheduler_attempt()},
          {"boot", boot_id()},      {"started", start_time(pid)}};
}

// flock on the lock file: the kernel's word on whether a live process holds it, whatever PID
// namespace it runs in (a container beside this one can have the same pid). Released when the
// holder exits, however it exits.
enum class Held { no, yes, unknown };  // unknown: the file system does not support it (Lustre's noflock)

Held try_flock(int fd) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return Held::no;
  return errno == EWOULDBLOCK ? Held::yes : Held::unknown;
}

// Why the lock's holder is known to be gone, or empty when it may still be running. AGE_S: how long
// ago the lock file was last written; FLOCKED: whether this job could take the kernel lock on it.
std::string gone(const nlohmann::json& holder, double age_s, Held flocked) {
  // Written right after the file is created and locked: a lock that names no owner some seconds
  // after its creation was left by a process that died in between (or a full disk), and would
  // otherwise block the directory for good. A younger one may be a job taking it right now.
  if (!holder.is_object() || !holder.contains("host") || !holder.contains("pid")) {
    if (age_s < 10.0 || flocked == Held::yes) return "";
    return "no owner it names (the lock file is empty or garbled: a crash or a full disk as it was taken)";
  }
  const auto me = this_process();
  // A scheduler restarts a job only once its earlier attempt is over, whatever lock a dead node's
  // file system still keeps for it. But two launches inside one attempt (two srun steps of one
  // sbatch script, two torchrun jobs given one rendezvous id) share the job's id and run together:
  // a held lock of this same attempt is a live job's.
  const std::string job = holder.value("job", "");
  // (Where flock says nothing, a same-attempt holder goes through the checks below, as any other.)
  if (!job.empty() && job == me.at("job").get<std::string>() &&
      holder.value("attempt", static_cast<int64_t>(-1)) < me.at("attempt").get<int64_t>())
    return "an earlier attempt of this job (" + job + ")";
  if (flocked == Held::yes) return "";  // a live process holds it, on this host or one sharing the file system
  // Another host's process may hold a lock that the file system keeps per node (Lustre's localflock).
  if (holder.value("host", "") != me.at("host").get<std::string>()) return "";
  const auto pid = holder.value("pid", static_cast<int64_t>(0));
  if (pid <= 0) return "";
  const std::string process = "process " + std::to_string(pid);
  if (flocked == Held::no) return process + ", no longer running (it holds no lock on the file)";
  // Without flock: what the pid says. Locks of loom before 2026-11-29 name only a pid.
  const std::string boot = holder.value("boot", ""), started = holder.value("started", "");
  const std::string my_boot = me.at("boot").get<std::string>();
  if (!boot.empty() && !my_boot.empty() && boot != my_boot) return process + ", of an earlier boot of this host";
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return process + ", no longer running";
  const std::string now = start_time(pid);
  if (!started.empty() && !now.empty() && now != started) return process + ", no longer running (its pid is reused)";
  return "";
}

// Writes TEXT over the file FD holds.
bool write_all(int fd, const std::string& text) {
  if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) return false;
  return ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
}

// A new lock file at PATH, kernel-locked before TEXT is written into it; its descriptor, or -1 with errno set.
int create_exclusively(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  (void)try_flock(fd);  // a new file: nobody else can hold it yet
  if (write_all(fd, text)) return fd;
  const int write_error = errno;
  ::unlink(path.c_str());  // an empty lock would block the directory for the next job's first seconds
  ::close(fd);
  errno = write_error == EEXIST || write_error == 0 ? EIO : write_error;
  return -1;
}

}  // namespace

std::string scheduler_job() {
  if (const char* id = std::getenv("SLURM_JOB_ID")) return std::string("slurm:") + id;
  const char* run = std::getenv("TORCHELASTIC_RUN_ID");
  if (run && std::string(run) != "none" && *run) return std::string("torchelastic:") + run;
  return "";
}

void throw_start_file_error(int error, const std::string& message) {
  if (error == EROFS) throw InputError(message);
  throw_file_error(error, message);
}

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& name, const std::string& what) {
  const fs::path path = fs::path(dir) / (".loom-" + name + ".lock");
  const std::string text = this_process().dump() + "\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (const int fd = create_exclusively(path, text); fd >= 0) {
      path_ = path.string(), fd_ = fd;
      return;
    }
    if (const int error = errno; error != EEXIST) {
      throw_start_file_error(error, "cannot create the lock file '" + path.string() + "' of " + what + " '" + dir +
                                        "': " + std::strerror(error));
    }
    // The holder's record first: a job taking the lock locks the file before it writes it, so a
    // record that is whole was written under the kernel lock.
    nlohmann::json holder;
    {
      std::ifstream in(path);
      try {
        in >> holder;
      } catch (const nlohmann::json::exception&) {
        holder = nlohmann::json::object();  // half-written by a process that died while taking it
      }
    }
    std::error_code age_error;
    const auto written = fs::last_write_time(path, age_error);
    const double age_s =
        age_error ? 0.0 : std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;  // removed since: its holder released it; try again
    const Held flocked = try_flock(fd);
    const std::string why = gone(holder, age_s, flocked);
    if (why.empty()) {
      ::close(fd);
      if (!holder.is_object() || !holder.contains("pid")) {
        throw InputError(what + " '" + dir + "' is being locked by another loom job right now ('" + path.string() +
                         "' names no owner yet): give this job its own, or retry once that job is gone");
      }
      throw InputError(what + " '" + dir + "' is in use by another loom job (host " + holder.value("host", "?") +
                       ", pid " + std::to_string(holder.value("pid", static_cast<int64_t>(0))) +
                       "): give this job its own, or remove '" + path.string() + "' if that job is gone");
    }
    log::warn("taking over the lock {} of {} '{}' left by {}", path.string(), what, dir, why);
    if (flocked == Held::no) {
      // Taken over in place, under the kernel lock: a second job taking it over at the same moment
      // finds it held, where removing and creating it again would let both through.
      if (!write_all(fd, text)) {
        const int error = errno;
        ::close(fd);
        throw_file_error(error, "cannot write the lock file '" + path.string() + "' of " + what + " '" + dir +
                                    "': " + std::strerror(error));
      }
      path_ = path.string(), fd_ = fd;
      return;
    }
    ::close(fd);
    std::error_code ignore;
    fs::remove(path, ignore);
  }
  throw InputError("cannot take the lock file '" + path.string() + "' of " + what + " '" + dir +
                   "': another job took it at the same moment");
}

DirectoryLock::~DirectoryLock() {
  release();
}

void DirectoryLock::release() {
  if (path_.empty()) return;
  std::error_code ignore;
  fs::remove(path_, ignore);  // before the kernel lock goes, so that no job takes over a file being removed
  if (fd_ >= 0) ::close(fd_);
  path_.clear();
  fd_ = -1;
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.path_.clear();
  other.fd_ = -1;
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.path_.clear();
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace loom::launch
