#include "launch/directory_lock.h"

#include <fcntl.h>
#include <signal.h>
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

// The scheduler job this process belongs to, when there is one: a restart of
// the same job may take over the lock of an attempt that died on another host.
std::string scheduler_job() {
  if (const char* id = std::getenv("SLURM_JOB_ID")) return std::string("slurm:") + id;
  const char* run = std::getenv("TORCHELASTIC_RUN_ID");
  if (run && std::string(run) != "none" && *run) return std::string("torchelastic:") + run;
  return "";
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
  return {
      {"host", host_name()}, {"pid", pid}, {"job", scheduler_job()}, {"boot", boot_id()}, {"started", start_time(pid)}};
}

// Why the lock's holder is known to be gone, or empty when it may still be running. AGE_S: how long
// ago the lock file was last written.
std::string gone(const nlohmann::json& holder, double age_s) {
  // Written in one call right after the file is created: a lock that names no owner some seconds
  // after its creation was left by a process that died in between (or a full disk), and would
  // otherwise block the directory for good. A younger one may be a job taking it right now.
  if (!holder.is_object() || !holder.contains("host") || !holder.contains("pid")) {
    if (age_s < 10.0) return "";
    return "no owner it names (the lock file is empty or garbled: a crash or a full disk as it was taken)";
  }
  const auto me = this_process();
  const std::string job = holder.value("job", "");
  if (!job.empty() && job == me.at("job").get<std::string>()) return "an earlier attempt of this job (" + job + ")";
  if (holder.value("host", "") != me.at("host").get<std::string>()) return "";
  const auto pid = holder.value("pid", static_cast<int64_t>(0));
  if (pid <= 0) return "";
  const std::string process = "process " + std::to_string(pid);
  // Locks written before loom recorded the boot and the start time name only a pid.
  const std::string boot = holder.value("boot", ""), started = holder.value("started", "");
  if (!boot.empty() && boot != me.at("boot").get<std::string>()) return process + ", of an earlier boot of this host";
  // Not this job (it holds no lock yet): the same pid again, a restart in a new container.
  if (pid == me.at("pid").get<int64_t>()) return process + ", which is now this job's (a restarted container)";
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return process + ", no longer running";
  const std::string now = start_time(pid);
  if (!started.empty() && !now.empty() && now != started) return process + ", no longer running (its pid is reused)";
  return "";
}

bool create_exclusively(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_error = errno;
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());  // an empty lock would block the directory for the next job's first seconds
    errno = write_error == EEXIST || write_error == 0 ? EIO : write_error;
  }
  return written;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& name, const std::string& what) {
  const fs::path path = fs::path(dir) / (".loom-" + name + ".lock");
  const std::string text = this_process().dump() + "\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (create_exclusively(path, text)) {
      path_ = path.string();
      return;
    }
    if (errno != EEXIST) {
      // Before a job has written anything, a read-only file system is the path the user chose (a
      // dataset's mount, say), not a failing machine: exit 2 rather than a requeue that meets it again.
      const int error = errno;
      const std::string message =
          "cannot create the lock file '" + path.string() + "' of " + what + " '" + dir + "': " + std::strerror(error);
      if (error == EROFS) throw InputError(message);
      throw_file_error(error, message);
    }
    nlohmann::json holder;
    std::ifstream in(path);
    try {
      in >> holder;
    } catch (const nlohmann::json::exception&) {
      holder = nlohmann::json::object();  // half-written by a process that died while taking it
    }
    std::error_code age_error;
    const auto written = fs::last_write_time(path, age_error);
    const double age_s =
        age_error ? 0.0 : std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
    const std::string why = gone(holder, age_s);
    if (why.empty()) {
      if (!holder.is_object() || !holder.contains("pid")) {
        throw InputError(what + " '" + dir + "' is being locked by another loom job right now ('" + path.string() +
                         "' names no owner yet): give this job its own, or retry once that job is gone");
      }
      throw InputError(what + " '" + dir + "' is in use by another loom job (host " + holder.value("host", "?") +
                       ", pid " + std::to_string(holder.value("pid", static_cast<int64_t>(0))) +
                       "): give this job its own, or remove '" + path.string() + "' if that job is gone");
    }
    log::warn("taking over the lock {} of {} '{}' left by {}", path.string(), what, dir, why);
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
  fs::remove(path_, ignore);
  path_.clear();
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

}  // namespace loom::launch
