#include "launch/resume_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/checkpoint_store.h"
#include "core/config_fields.h"
#include "core/crc32c.h"
#include "core/errors.h"
#include "core/logging.h"
#include "core/per_node_keys.h"
#include "launch/data_record.h"
#include "launch/resume_checks.h"

namespace loom::launch {
namespace fs = std::filesystem;

void continue_lineage_from(const std::string& dir, const std::string& path, int64_t step) {
  if (dir.empty()) return;
  std::error_code error;
  for (const auto& other : list_checkpoints(dir)) {
    if (fs::equivalent(other.path, path, error)) continue;
    // Newer: what this run replaces. Of the same step and not PATH (PATH is set aside, or another
    // directory's): another line of training, which --resume auto must not take for this one's.
    if (other.step < step) continue;
    const auto moved = set_aside(other.path, "abandoned");
    log::warn("set aside {} as {}: {} {}, which this run continues from", other.path, moved,
              other.step > step ? "it is newer than" : "it is another line of training's checkpoint of the step of",
              path);
  }
  // Until this run saves, `latest` names PATH wherever it is: a job stopped before its first save
  // and requeued with --resume auto continues PATH, not what the directory held before.
  set_latest(dir, path);
}

std::string hand_resume_line(const Config& config, const std::string& resume) {
  Config command = without_per_node_keys(config);
  command.parallel = ParallelConfig{};  // a requeue may get another allocation: the layout changes no number
  // Nor do these, which a user may raise between attempts as their messages advise.
  command.train.step_timeout_s = 0;
  command.train.exit_duration_mins = 0;
  // Only the keys set away from their defaults: a key added to loom later leaves the lines it finds alone.
  const Config defaults;
  std::string text;
  for (const auto& field : config_fields()) {
    const std::string value = field.print(command);
    if (value != field.print(defaults)) text += field.name() + ": " + value + "\n";
  }
  text += "--resume " + fs::absolute(resume).lexically_normal().string();
  return fmt::format("{:08x}", crc32c(text));
}

std::vector<CheckpointInfo> saved_since_by_job(const std::string& resume, const Config& config, const std::string& job,
                                               const std::string& line) {
  std::vector<CheckpointInfo> since;
  const std::string& dir = config.checkpoint.dir;
  if (job.empty() || dir.empty() || resume == "auto") return since;
  int64_t after = -1;  // PATH's step; -1 when checkpoint.keep removed it (every save of the line is newer)
  try {
    after = read_manifest(resume).at("step").get<int64_t>();
  } catch (const std::exception&) {
  }
  const int64_t limit = config.train.exit_after;  // (one at it is refused: it would train nothing)
  for (const auto& candidate : resume_candidates(dir)) {
    if (candidate.step <= after || (limit >= 0 && candidate.step >= limit)) continue;
    try {
      const auto manifest = read_manifest(candidate.path);
      if (manifest.value("job", std::string()) == job && manifest.value("line", std::string()) == line)
        since.push_back(candidate);
    } catch (const std::exception&) {
      // unreadable: not known to be the line's
    }
  }
  return since;
}

ResumeChoice choose_resume_checkpoint(const std::string& resume, const std::vector<CheckpointInfo>& candidates,
                                      const Config& config, const nlohmann::json& data_now, bool allow_data_change) {
  const std::string& dir = config.checkpoint.dir;
  ResumeChoice chosen;
  std::vector<std::string> set_aside_now;      // what --resume auto found and could not use
  std::vector<std::string> refused_elsewhere;  // the same, in another directory (`latest` named it): left there
  const std::string missing = resume == "auto" ? latest_names_missing(dir) : "";  // (before the choice rewrites it)
  // (Only under auto: a user may be resuming a .step_N.tmp by hand.)
  for (const auto& unfinished : resume == "auto" ? remove_unfinished_saves(dir) : std::vector<std::string>{}) {
    // latest.tmp and latest.publishing are a save's last word on `latest`: its checkpoint folder
    // was complete by then (one a save did not finish is a .step_N.tmp, named on its own).
    const std::string name = fs::path(unfinished).filename().string();
    if (name.rfind("latest.", 0) == 0) {
      log::info("removed {}: what a save left while it pointed 'latest' at its checkpoint", unfinished);
    } else {
      log::warn("removed {}: a save that did not finish (a full disk, or a job stopped while saving)", unfinished);
    }
  }
  if (resume == "auto") {
    for (const auto& folder : unreadable_checkpoints(dir)) {
      set_aside_now.push_back(set_aside(folder, "corrupt"));
      log::warn("refusing checkpoint {}: it has no manifest.json; set aside as {}", folder, set_aside_now.back());
    }
  }
  for (size_t i = 0; i < candidates.size() && chosen.index == -1; ++i) {
    const std::string problem = verify_checkpoint(candidates[i].path);
    if (problem.empty()) {
      chosen.index = static_cast<int64_t>(i);
      try {  // (a refusal here, e.g. a 'latest' that is a directory, reaches every rank below)
        const auto manifest = read_manifest(candidates[i].path);
        // Refused before checkpoint.dir is touched: a refused resume sets no newer checkpoint aside.
        chosen.refusal = resume_refusal(manifest, config, data_now, allow_data_change);
        if (!chosen.refusal.empty()) throw InputError(candidates[i].path + ": " + chosen.refusal);
        if (const auto changed = data_change(manifest, data_now); !changed.empty()) {
          log::warn(
              "--resume {}: --allow-data-change: the data changed ({}); training goes on after sample {} of "
              "the new order",
              candidates[i].path, changed, manifest.at("consumed_samples").get<int64_t>());
        }
        // A rollback that trains nothing (train.steps at or below its step) sets nothing aside.
        const auto step = manifest.at("step").get<int64_t>();
        if (resume_has_work(config.train, step)) continue_lineage_from(dir, candidates[i].path, step);
      } catch (const InputError& e) {
        chosen.refusal = e.what();
        chosen.index = -2;
      }
    } else if (resume == "auto" && in_checkpoint_dir(dir, candidates[i].path)) {
      set_aside_now.push_back(set_aside(candidates[i].path, "corrupt"));
      log::warn("refusing checkpoint {}: {}; set aside as {}, falling back to the previous one", candidates[i].path,
                problem, set_aside_now.back());
    } else if (resume == "auto") {  // another directory's, which `latest` names: not loom's to rename
      refused_elsewhere.push_back(candidates[i].path);
      log::warn("refusing checkpoint {}, which 'latest' names: {}; falling back to the previous one",
                candidates[i].path, problem);
    } else {
      chosen.refusal = problem;
      chosen.index = -2;
    }
  }
  // Checkpoints were there and none could be used: starting fresh would train from scratch and
  // append steps the metrics already hold. The user decides (the folders are set aside, not gone).
  if (chosen.index == -1 && (!set_aside_now.empty() || !refused_elsewhere.empty())) {
    std::string found;
    for (const auto& moved : set_aside_now) found += (found.empty() ? "set aside as " : ", ") + moved;
    for (const auto& left : refused_elsewhere) found += (found.empty() ? "" : "; ") + left + ", which 'latest' names";
    chosen.refusal = "checkpoint.dir '" + dir + "' holds no usable checkpoint: every one failed its checks (" + found +
                     "); resume one by hand with --resume PATH, or start afresh without --resume";
    chosen.index = -2;
  }
  // None here now, but a run saved some (set aside; `latest` may name one): refused again, or a
  // restart of the refused job would start afresh beside its metrics.
  if (resume == "auto" && chosen.index == -1) {
    std::string earlier = missing.empty() ? "" : "its 'latest' names " + missing + ", ";
    for (const auto& corrupt : corrupt_checkpoints(dir)) earlier += corrupt + " (set aside), ";
    if (!earlier.empty()) {
      chosen.refusal = "checkpoint.dir '" + dir + "' holds no usable checkpoint, but a run saved there: " + earlier +
                       "resume one by hand with --resume PATH, or move these away (and '" +
                       (fs::path(dir) / "latest").string() + "') to start afresh";
      chosen.index = -2;
    }
  } else if (!missing.empty() && chosen.index >= 0 &&
             std::none_of(set_aside_now.begin(), set_aside_now.end(), [&](const std::string& moved) {
               return moved.rfind((fs::path(dir) / missing).string() + ".", 0) == 0;  // said already
             })) {
    log::warn("checkpoint.dir '{}': 'latest' names '{}', which is not one of its checkpoints: resuming from {}", dir,
              missing, candidates[static_cast<size_t>(chosen.index)].path);
  }
  return chosen;
}

}  // namespace loom::launch
