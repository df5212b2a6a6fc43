// The checkpoint directory as a whole: which checkpoints it holds, which one
// the run going on continues from, which are known good, and which were set
// aside. A job left alone for weeks must never trade a good checkpoint for a
// bad one, so step numbers alone decide nothing:
//   latest              names the checkpoint the run going on last saved or
//                       resumed from; `--resume auto` tries it first. Its folder
//                       name, or its absolute path when a run was resumed by hand
//                       from another directory's checkpoint
//   step_N/verified     a step trained from step_N's state had a finite loss:
//                       the state is known good. Retention never removes the
//                       newest verified checkpoint, whatever `keep` says
//   step_N.corrupt      set aside: failed its checks when a run tried it
//   step_N.abandoned    set aside: newer than a checkpoint a run was rolled back to
//   step_N.diverged     set aside: the state a diverged run could not train from
// Set-aside checkpoints are renamed, never deleted (the user decides), and no
// longer count as checkpoints for `auto` or retention.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
};

// Complete checkpoints (step_NNNNNNNN with a manifest) under DIR, newest step first.
std::vector<CheckpointInfo> list_checkpoints(const std::string& dir);

// Folders under DIR named as checkpoints (step_NNNNNNNN) that have no manifest: a save loom did not
// finish (it writes under a temporary name and renames last) or a folder damaged by hand. Never
// deleted: `--resume auto` sets them aside, and a save of the same step moves them out of its way.
std::vector<std::string> unreadable_checkpoints(const std::string& dir);

// The checkpoints of DIR that `--resume auto` set aside as corrupt (step_N.corrupt, step_N.corrupt.2, ...).
std::vector<std::string> corrupt_checkpoints(const std::string& dir);

// Removes what saves left unfinished under DIR: their temporary folders (.step_NNNNNNNN.tmp, never
// a checkpoint: a save renames its folder into place last), `latest.tmp` and a settled or stale
// `latest.publishing` (after resume_candidates has read it). A save that failed (a
// full disk) or a job killed while saving leaves them; on a full disk they keep the next job from
// writing anything. Returns the paths removed.
std::vector<std::string> remove_unfinished_saves(const std::string& dir);

// The checkpoint `latest` names, when it is complete: one of DIR's, or the one a run resumed by
// hand from and has not saved after yet (a folder of DIR set aside, or another directory's).
std::optional<CheckpointInfo> latest_checkpoint(const std::string& dir);
// What `latest` names when that is no complete checkpoint (set aside or removed since a run saved
// it); "" when `latest` names one, or nothing.
std::string latest_names_missing(const std::string& dir);

// Points `latest` at the checkpoint at PATH (a folder of DIR, or another directory's, named then
// by its absolute path), atomically; nothing is written when it already does. Any announced
// publish (below) is then settled: its file is removed.
void set_latest(const std::string& dir, const std::string& path);

// Whether the checkpoint folder PATH (relative, absolute, with a trailing slash or not) is one of
// DIR's own (and so loom's to mark, rename or set aside): what `latest` names by its folder's name.
bool in_checkpoint_dir(const std::string& dir, const std::string& path);

// A save announces the checkpoint it is about to rename into place (PATH, inside DIR) in
// `latest.publishing`, durably, before the rename, with what `latest` names meanwhile; set_latest
// removes it. A job stopped between the rename and `latest`'s update leaves it naming a complete
// checkpoint newer than `latest`, which `--resume auto` then continues from: the save is not lost.
// It counts only while `latest` names what it did: a `latest` set back by hand since (a rollback)
// is honoured.
void announce_publish(const std::string& dir, const std::string& path);
// The complete checkpoint of DIR that an unsettled announcement names, if any.
std::optional<CheckpointInfo> announced_checkpoint(const std::string& dir);

// The order `--resume auto` tries DIR's checkpoints in: the one an unsettled announcement names,
// else the one `latest` names (which may be none of DIR's own), then the rest newest first.
std::vector<CheckpointInfo> resume_candidates(const std::string& dir);

// Flushes PATH (a file, or a directory's entries) to disk; a crash may not leave a name pointing at
// data still in the page cache.
void fsync_path(const std::string& path);

void mark_verified(const std::string& path);
bool is_verified(const std::string& path);

// Renames the checkpoint at PATH to PATH.REASON (PATH.REASON.2, ... if taken); returns the new path.
std::string set_aside(const std::string& path, const std::string& reason);

// Removes all but the newest KEEP checkpoints of DIR, except the newest verified one. Returns what it removed.
// Each is renamed out of the checkpoints' names before its files go (.step_N.deleting).
std::vector<std::string> apply_retention(const std::string& dir, int64_t keep);

// Finishes removing what retention renamed for deletion and a killed job left (.step_N.deleting).
void finish_deletions(const std::string& dir);

}  // namespace loom
