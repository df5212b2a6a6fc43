#include "launch/run_directory.h"

#include <yaml-cpp/yaml.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checkpoint_directory.h"
#include "core/errors.h"
#include "core/logging.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;

constexpr char kRefused = '\x01';  // starts the store's value when rank 0 refused the directory
constexpr char kFailed = '\x02';   // ... or its file system failed it (EnvironmentError, exit 75)

std::string default_run_dir(const std::string& config_path) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  std::string base = "runs/" + fs::path(config_path).stem().string() + "-" + stamp;
  std::string dir = base;
  for (int i = 2; fs::exists(dir); ++i) dir = base + "-" + std::to_string(i);
  return dir;
}

void create_directory(const std::string& dir, const std::string& what) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw_start_file_error(error.value(), "cannot create " + what + " '" + dir + "': " + error.message());
}

// The checkpoint.dir in the config.yaml an earlier run wrote into its run directory; empty if none.
std::string recorded_checkpoint_dir(const fs::path& config_yaml) {
  try {
    const YAML::Node dir = YAML::LoadFile(config_yaml.string())["checkpoint"]["dir"];
    return dir && dir.IsScalar() ? dir.as<std::string>() : "";
  } catch (const YAML::Exception&) {
    return "";
  }
}

// The run directory a resume without --run-dir continues: the one the checkpoint it will resume
// recorded (a run's curves stay in one place); empty when there is none to read.
// Only for a checkpoint of this run's checkpoint.dir whose recorded directory still exists: a
// checkpoint copied from elsewhere, or another run's that this one branches from, starts a new one.
std::string resumed_run_dir(const TrainArgs& args, const Config& config) {
  if (config.checkpoint.dir.empty()) return "";
  std::string checkpoint = args.resume;
  std::error_code error;
  if (args.resume == "auto") {
    const auto candidates = resume_candidates(config.checkpoint.dir);
    if (candidates.empty()) return "";
    checkpoint = candidates.front().path;
  } else if (!fs::equivalent(fs::path(checkpoint).parent_path(), config.checkpoint.dir, error) || error) {
    return "";
  }
  std::ifstream in(fs::path(checkpoint) / "manifest.json");
  const auto manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || !manifest.contains("run_dir") || !manifest.at("run_dir").is_string()) return "";
  const std::string recorded = manifest.at("run_dir").get<std::string>();
  if (!fs::is_directory(recorded, error)) return "";
  // A checkpoint.dir copied to branch off (cp -r ck ck2) names the original's run directory: that
  // run's curves and config.yaml are not this one's to rewrite. (Manifests before checkpoint_dir:
  // the run's config.yaml says, relative to where that run started.)
  const std::string saved_to = manifest.contains("checkpoint_dir") && manifest.at("checkpoint_dir").is_string()
                                   ? manifest.at("checkpoint_dir").get<std::string>()
                                   : recorded_checkpoint_dir(fs::path(recorded) / "config.yaml");
  if (saved_to.empty() || !fs::equivalent(saved_to, config.checkpoint.dir, error) || error) return "";
  return recorded;
}

// The flag asks to start anew where a resume goes on: said, where it was passed over without a word.
void warn_overwrite_passed_over(const TrainArgs& args, const RunDirectory& run) {
  log::warn(
      "--overwrite-run-dir does not start anew: --resume {} continues from a checkpoint, appending to the records of "
      "run directory {} (a fresh run there needs no --resume)",
      args.resume, run.path);
}

// Every start-up check of the directories, and nothing written into them but the locks: a refused
// run leaves what a user saved as it was (the trainer writes config.yaml and starts metrics.jsonl
// once the checkpoint, if any, has loaded).
RunDirectory open_on_rank0(const TrainArgs& args, const Config& config) {
  RunDirectory run;
  run.path = args.run_dir;
  if (run.path.empty() && !args.resume.empty()) {
    run.path = resumed_run_dir(args, config);
    if (!run.path.empty()) {
      log::info("--resume: continuing the run directory {} (the resumed run's); --run-dir chooses another", run.path);
    }
  }
  if (run.path.empty()) run.path = default_run_dir(args.config_path);
  if (args.overwrite_run_dir && !args.resume.empty() && args.resume != "auto") warn_overwrite_passed_over(args, run);
  create_directory(run.path, "run directory");
  run.run_lock = DirectoryLock(run.path, "run", "run directory");
  std::error_code error;
  const auto metrics = fs::path(run.path) / "metrics.jsonl";
  const bool has_metrics = fs::file_size(metrics, error) > 0 && !error;
  // The rows a resume rolled back (its metrics.jsonl may be empty then) are that run's too.
  const bool has_superseded = fs::file_size(fs::path(run.path) / "metrics.superseded.jsonl", error) > 0 && !error;
  if (args.resume.empty() && !args.overwrite_run_dir && (has_metrics || has_superseded)) {
    throw InputError("run directory '" + run.path + "' holds another run's " +
                     (has_metrics ? "metrics.jsonl" : "metrics.superseded.jsonl") +
                     ", which a fresh run would "
                     "replace: pass --resume auto to continue that run, give this one another --run-dir, or pass "
                     "--overwrite-run-dir to start anew there");
  }
  // The run writes its resolved config as config.yaml: one loom did not write there (the user's own
  // config, kept beside the run's outputs) would be replaced, comments and all.
  const auto config_yaml = fs::path(run.path) / "config.yaml";
  std::string first_line;
  if (!args.overwrite_run_dir && !has_metrics && fs::exists(config_yaml, error) &&
      !(std::getline(std::ifstream(config_yaml), first_line) && first_line == kRunConfigHeader)) {
    throw InputError("run directory '" + run.path + "' holds a config.yaml that loom did not write (your config?), " +
                     "where this run writes its resolved config: give the run another --run-dir (e.g. " +
                     (fs::path(run.path) / "run").string() + ") or pass --overwrite-run-dir to replace it");
  }
  if (!config.checkpoint.dir.empty()) {
    if (args.resume == "auto" && !fs::is_directory(config.checkpoint.dir, error) && has_metrics &&
        !args.overwrite_run_dir) {
      // A typo, or a relative checkpoint.dir under a requeue started in another folder: starting
      // fresh would train the run again from step 0 over its own curves.
      const std::string earlier = recorded_checkpoint_dir(config_yaml);
      throw InputError("--resume auto: checkpoint.dir '" + config.checkpoint.dir + "' (" +
                       fs::absolute(config.checkpoint.dir).lexically_normal().string() +
                       ") does not exist, but run directory '" + run.path + "' holds an earlier run's metrics.jsonl" +
                       (earlier.empty() ? std::string() : ", whose config.yaml has checkpoint.dir '" + earlier + "'") +
                       ": nothing here would continue that run. Give the checkpoint.dir it saved to, or pass "
                       "--overwrite-run-dir to train anew from step 0 in this directory");
    }
    if (args.resume == "auto" && !fs::is_directory(config.checkpoint.dir, error)) {
      log::warn(
          "--resume auto: checkpoint.dir '{}' does not exist, so there is nothing to resume: starting fresh (if this "
          "run was meant to continue another, that run's checkpoint.dir is elsewhere)",
          config.checkpoint.dir);
    }
    create_directory(config.checkpoint.dir, "checkpoint.dir");
    run.checkpoint_lock = DirectoryLock(config.checkpoint.dir, "checkpoints", "checkpoint.dir");
    const auto existing = list_checkpoints(config.checkpoint.dir);
    if (args.overwrite_run_dir && args.resume == "auto" && !existing.empty()) warn_overwrite_passed_over(args, run);
    if (args.resume.empty() && !existing.empty()) {
      throw InputError("checkpoint.dir '" + config.checkpoint.dir + "' already holds checkpoints (the newest " +
                       fs::path(existing.front().path).filename().string() +
                       "), which a fresh run would overwrite: pass --resume auto to continue that run, --resume "
                       "CHECKPOINT to start from one, or give this run another checkpoint.dir");
    }
  }
  return run;
}

}  // namespace

RunDirectory agree_on_run_dir(const TrainArgs& args, const Config& config, const parallel::LaunchEnv& env) {
  if (env.rank() == 0) {
    auto publish = [&](const std::string& value) {
      if (env.store()) env.store()->set("run_dir", std::vector<uint8_t>(value.begin(), value.end()));
    };
    // The other ranks are waiting for the directory: they fail with the same message (and exit
    // code) rather than a timeout.
    try {
      RunDirectory run = open_on_rank0(args, config);
      publish(run.path);
      return run;
    } catch (const InputError& e) {
      publish(kRefused + std::string(e.what()));
      throw;
    } catch (const EnvironmentError& e) {
      publish(kFailed + std::string(e.what()));
      throw;
    }
  }
  auto bytes = env.store()->get("run_dir");
  RunDirectory run;
  run.path.assign(bytes.begin(), bytes.end());
  if (!run.path.empty() && run.path[0] == kRefused) throw InputError("rank 0: " + run.path.substr(1));
  if (!run.path.empty() && run.path[0] == kFailed) throw EnvironmentError("rank 0: " + run.path.substr(1));
  return run;
}

}  // namespace loom::launch
