#include "core/checkpoint_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/errors.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

constexpr const char* kVerified = "verified";
constexpr const char* kAnnouncement = "latest.publishing";
constexpr const char* kDeleting = ".deleting";  // .step_N.deleting: a checkpoint retention is removing

// "step_" and digits only: step_00000012.corrupt is not a checkpoint any more.
std::optional<int64_t> step_of_name(const std::string& name) {
  if (name.size() <= 5 || name.rfind("step_", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
    return std::nullopt;
  return std::stoll(digits);
}

// The entries of DIR (none when it is no directory) that KEEP accepts, sorted by path.
std::vector<std::string> entries_where(const std::string& dir, const std::function<bool(const fs::path&)>& keep) {
  std::vector<std::string> out;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return out;
  for (const auto& entry : fs::directory_iterator(dir, error))
    if (keep(entry.path())) out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointInfo> out;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return out;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const auto step = step_of_name(entry.path().filename().string());
    if (step && fs::exists(entry.path() / "manifest.json", error)) out.push_back({*step, entry.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

std::vector<std::string> unreadable_checkpoints(const std::string& dir) {
  return entries_where(dir, [](const fs::path& path) {
    std::error_code error;
    return step_of_name(path.filename().string()) && !fs::exists(path / "manifest.json", error);
  });
}

std::vector<std::string> corrupt_checkpoints(const std::string& dir) {
  return entries_where(dir, [](const fs::path& path) {
    const std::string name = path.filename().string();
    const auto dot = name.find(".corrupt");
    return dot != std::string::npos && step_of_name(name.substr(0, dot));
  });
}

std::vector<std::string> remove_unfinished_saves(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return removed;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool save = name.size() > 5 && name.front() == '.' && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
                      step_of_name(name.substr(1, name.size() - 5));
    if (save || name == "latest.tmp" || name == kAnnouncement) removed.push_back(entry.path().string());
  }
  finish_deletions(dir);  // (not reported: retention meant them gone)
  // Only what is really gone is reported.
  removed.erase(std::remove_if(removed.begin(), removed.end(),
                               [](const std::string& path) {
                                 std::error_code failed;
                                 fs::remove_all(path, failed);
                                 return static_cast<bool>(failed);
                               }),
                removed.end());
  std::sort(removed.begin(), removed.end());
  return removed;
}

namespace {

// The first line of DIR/FILE without its line end ("" when there is none): what `latest` names,
// a folder of DIR or an absolute path (which may hold spaces).
std::string first_line(const std::string& dir, const char* file) {
  std::string line;
  std::ifstream in(fs::path(dir) / file);
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// How `latest` names the checkpoint at PATH: its folder name inside DIR, its absolute path elsewhere.
fs::path folder_of(const std::string& path) {
  fs::path folder = fs::absolute(path).lexically_normal();
  if (!folder.has_filename()) folder = folder.parent_path();  // ck/step_N/: its folder, not ""
  return folder;
}

std::string latest_entry_for(const std::string& dir, const std::string& path) {
  const fs::path folder = folder_of(path);
  return in_checkpoint_dir(dir, path) ? folder.filename().string() : folder.string();
}

// The complete checkpoint of DIR whose folder is NAME.
std::optional<CheckpointInfo> checkpoint_named(const std::string& dir, const std::string& name) {
  if (name.empty()) return std::nullopt;
  for (const auto& c : list_checkpoints(dir)) {
    if (fs::path(c.path).filename() == name) return c;
  }
  return std::nullopt;
}

}  // namespace

bool in_checkpoint_dir(const std::string& dir, const std::string& path) {
  std::error_code error;
  return !dir.empty() && fs::equivalent(folder_of(path).parent_path(), dir, error) && !error;
}

void set_latest(const std::string& dir, const std::string& path) {
  if (fs::is_directory(fs::path(dir) / "latest")) {
    throw InputError("checkpoint.dir '" + dir +
                     "': 'latest' is a directory; loom keeps there a file naming the newest checkpoint: move it away");
  }
  // Not rewritten when it already names PATH: on a full disk the rewrite would fail, and the job.
  const std::string entry = latest_entry_for(dir, path);
  if (first_line(dir, "latest") != entry) {
    const fs::path temporary = fs::path(dir) / "latest.tmp";
    {
      errno = 0;
      std::ofstream out(temporary, std::ios::trunc);
      out << entry << "\n";
      if (!out.flush()) throw_write_error("cannot write '" + temporary.string() + "'");
    }
    fs::rename(temporary, fs::path(dir) / "latest");
  }
  fsync_path(dir);  // (an earlier rename may not have reached the disk either; this needs no space)
  // Settled: `latest` names what was announced, or a checkpoint loom chose since.
  std::error_code ignore;
  if (fs::remove(fs::path(dir) / kAnnouncement, ignore)) fsync_path(dir);
}

void announce_publish(const std::string& dir, const std::string& path) {
  const fs::path file = fs::path(dir) / kAnnouncement;
  const std::string latest = first_line(dir, "latest");
  {
    errno = 0;
    std::ofstream out(file, std::ios::trunc);
    // The checkpoint, and what `latest` names meanwhile: a `latest` changed since is a choice made
    // after this save (a rollback by hand), which the announcement must not override.
    out << fs::path(path).filename().string() << "\nafter " << (latest.empty() ? "-" : latest) << "\n";
    if (!out.flush()) throw_write_error("cannot write '" + file.string() + "'");
  }
  // On disk before the rename it announces: a crash must not keep the rename and lose this.
  fsync_path(file.string());
  fsync_path(dir);
}

std::optional<CheckpointInfo> latest_checkpoint(const std::string& dir) {
  const std::string entry = first_line(dir, "latest");
  if (entry.empty()) return std::nullopt;
  if (auto live = checkpoint_named(dir, entry)) return live;
  // A run resumed by hand from a checkpoint that is none of DIR's (one set aside, or another
  // directory's) continues it until its first save: `latest` names that folder. (A checkpoint of
  // DIR's that is gone, or set aside since under another name, leaves no manifest there: nothing.)
  const fs::path path = fs::path(entry).is_absolute() ? fs::path(entry) : fs::path(dir) / entry;
  const std::string name = path.filename().string();
  std::error_code error;
  if (!fs::is_regular_file(path / "manifest.json", error)) return std::nullopt;
  // (Its step orders nothing: it is tried first, and its manifest says the step. A copied or
  // renamed checkpoint's folder may hold none.)
  return CheckpointInfo{step_of_name(name.substr(0, name.find('.'))).value_or(-1), path.string()};
}

std::string latest_names_missing(const std::string& dir) {
  const std::string name = first_line(dir, "latest");
  return name.empty() || latest_checkpoint(dir) ? std::string() : name;
}

std::optional<CheckpointInfo> announced_checkpoint(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kAnnouncement);
  std::string name, after;
  if (!std::getline(in, name) || !std::getline(in, after) || after.rfind("after ", 0) != 0) return std::nullopt;
  const std::string latest = first_line(dir, "latest");
  if (after.substr(6) != (latest.empty() ? "-" : latest)) return std::nullopt;
  return checkpoint_named(dir, name);
}

std::vector<CheckpointInfo> resume_candidates(const std::string& dir) {
  auto all = list_checkpoints(dir);
  auto first = announced_checkpoint(dir);
  if (!first) first = latest_checkpoint(dir);
  if (const auto& latest = first) {
    auto it = std::find_if(all.begin(), all.end(), [&](const auto& c) { return c.path == latest->path; });
    if (it == all.end()) {
      all.insert(all.begin(), *latest);  // a checkpoint outside DIR's own (set aside, or elsewhere)
    } else {
      std::rotate(all.begin(), it, it + 1);
    }
  }
  return all;
}

void mark_verified(const std::string& path) {
  std::ofstream out(fs::path(path) / kVerified, std::ios::trunc);
  out << "a step trained from this state had a finite loss\n";
}

bool is_verified(const std::string& path) {
  std::error_code error;
  return fs::exists(fs::path(path) / kVerified, error);
}

std::string set_aside(const std::string& path, const std::string& reason) {
  std::string target = path + "." + reason;
  for (int i = 2; fs::exists(target); ++i) target = path + "." + reason + "." + std::to_string(i);
  fs::rename(path, target);
  fsync_path(fs::path(path).parent_path().string());
  return target;
}

void finish_deletions(const std::string& dir) {
  std::error_code error;
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 1 + std::strlen(kDeleting) && name.front() == '.' &&
        name.compare(name.size() - std::strlen(kDeleting), std::strlen(kDeleting), kDeleting) == 0)
      doomed.push_back(entry.path());
  }
  for (const auto& path : doomed) fs::remove_all(path, error);
}

std::vector<std::string> apply_retention(const std::string& dir, int64_t keep) {
  const auto all = list_checkpoints(dir);
  const auto newest_verified =
      std::find_if(all.begin(), all.end(), [](const CheckpointInfo& c) { return is_verified(c.path); });
  std::vector<std::string> removed;
  finish_deletions(dir);
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) {
    if (all.begin() + static_cast<std::ptrdiff_t>(i) == newest_verified) continue;
    // Out of the checkpoints' names first (one rename): a job killed while removing the files
    // leaves a folder that is no checkpoint, which the next start or save finishes removing, not a
    // step_N without its manifest that every --resume auto would set aside as corrupt and keep.
    const fs::path doomed = fs::path(dir) / ("." + fs::path(all[i].path).filename().string() + kDeleting);
    std::error_code ignore;
    fs::rename(all[i].path, doomed, ignore);
    fs::remove_all(ignore ? fs::path(all[i].path) : doomed, ignore);
    removed.push_back(all[i].path);
  }
  return removed;
}

}  // namespace loom
