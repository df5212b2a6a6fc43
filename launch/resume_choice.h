// Which checkpoint a resume continues from: rank 0's choice among --resume auto's candidates (or
// the one a user named), each checked whole (every file's CRC-32) before checkpoint.dir is touched.
// It runs on a thread of its own while the other ranks wait (parallel/rank_work.h): everything it
// uses is its own copy.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint_directory.h"
#include "core/config.h"

namespace loom::launch {

struct ResumeChoice {
  int64_t index = -1;   // into the candidates; -1 none (start afresh), -2 refused
  std::string refusal;  // why, for -2
};

// Rank 0. RESUME is --resume's value ("auto" or a path); CANDIDATES what it names, newest first;
// DATA_NOW this run's data record (launch/data_record.h). Under auto, clears what unfinished saves
// left, sets unusable checkpoints aside (saying so), and once a checkpoint is chosen sets aside the
// newer ones this run abandons and points `latest` at it.
ResumeChoice choose_resume_checkpoint(const std::string& resume, const std::vector<CheckpointInfo>& candidates,
                                      const Config& config, const nlohmann::json& data_now, bool allow_data_change);

// Whether a run resumed at STEP trains (or, at train.exit_after == STEP, saves): one that does
// neither leaves checkpoint.dir and the run directory as they were.
inline bool resume_has_work(const TrainConfig& train, int64_t step) {
  return step < train.steps || train.exit_after == step;
}

// A job its scheduler runs again (a SLURM requeue, torchrun's restart) repeats its command line: a
// --resume PATH typed by hand would take it back to PATH, setting aside all that its earlier attempts
// saved since (or fail, once checkpoint.keep removed PATH). A hand-resumed run's checkpoints record
// its line: this digest of the config (less the layout and per-node keys, which change no number)
// and of PATH.
std::string hand_resume_line(const Config& config, const std::string& resume);
// The checkpoints of CONFIG's checkpoint.dir that job JOB (launch/directory_lock.h's scheduler_job)
// saved on LINE after PATH's step and before train.exit_after, newest first: what a restart of that
// job continues instead of PATH. Empty for JOB "" or when there is none.
std::vector<CheckpointInfo> saved_since_by_job(const std::string& resume, const Config& config, const std::string& job,
                                               const std::string& line);

// After choosing PATH at STEP to resume from: the newer checkpoints of DIR are set aside as abandoned.
void continue_lineage_from(const std::string& dir, const std::string& path, int64_t step);

}  // namespace loom::launch
