#include "launch/directory_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

nlohmann::json this_process() {
  return {{"host", host_name()}, {"pid", static_cast<int64_t>(::getpid())}, {"job", scheduler_job()}};
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
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
    return "process " + std::to_string(pid) + ", no longer running";
  return "";
}

bool create_exclusively(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
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
      throw InputError("cannot create the lock file '" + path.string() + "' of " + what + " '" + dir +
                       "': " + std::strerror(errno));
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
