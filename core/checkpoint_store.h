// Checkpoints on disk, independent of any layout. A checkpoint is a directory
// CHECKPOINT_DIR/step_00000040/ holding:
//   manifest.json      every tensor by global name and global shape, with the
//                      slices that make it up (file, byte range, offset along
//                      the split dimension), every file's size and CRC-32, the
//                      step, consumed samples and the layout that wrote it, and
//                      a CRC-32 of itself (an edited byte offset would
//                      otherwise load the wrong bytes without a word)
//   config.yaml        the resolved config of the run that wrote it
//   rank_00003.bin     the slices rank 3 owns (nothing is written twice)
// It is written to .tmp_step_00000040/, and renamed when every rank has
// finished and the manifest is flushed; `latest` then names it. A directory
// without a manifest is never a checkpoint, so a job killed while saving
// leaves the previous checkpoint the newest complete one. The directory as a
// whole (latest, verified, set aside, retention): core/checkpoint_directory.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint_directory.h"

namespace loom {

std::string checkpoint_name(int64_t step);  // "step_00000040"

// One rank's slices, written to one file of a checkpoint being saved.
class ShardWriter {
 public:
  // Writes into DIRECTORY/FILE_NAME.
  ShardWriter(std::string directory, std::string file_name);
  // A slice of tensor NAME (global shape GLOBAL_SHAPE): indices [OFFSET, OFFSET + length) along DIM (-1: whole).
  void add(const std::string& name, const std::vector<int64_t>& global_shape, int64_t dim, int64_t offset,
           const torch::Tensor& slice);
  // Raw bytes (a uint8 tensor, such as an RNG state) under NAME, read back by read_checkpoint_bytes.
  void add_bytes(const std::string& name, const torch::Tensor& bytes);
  // Writes and flushes the file; returns its entries and {bytes, crc32} for the manifest.
  nlohmann::json finish();

 private:
  std::string directory_, file_name_;
  // Host copies of the slices, in file order: one copy each, no buffer regrown as they are added
  // (with checkpoint.async they are the snapshot the background thread writes).
  std::vector<torch::Tensor> pieces_;
  size_t bytes_ = 0;
  nlohmann::json entries_ = nlohmann::json::array();
};

// Empty when every file of the checkpoint at PATH is present with its size and
// checksum; otherwise why not, naming the file.
std::string verify_checkpoint(const std::string& path);

// Reads PATH/manifest.json, checks its own checksum and that it has the keys
// reading needs; throws InputError naming the file (and the key).
nlohmann::json read_manifest(const std::string& path);

// Writes the manifest (with its checksum) into the temporary directory, flushes
// it, renames the directory to its final name, points `latest` at it, and
// removes all but the newest KEEP checkpoints and the newest verified one
// (apply_retention). PUBLISHED, when given, is told the final path once `latest` names it, before
// the removals (which a slow file system can make long). Returns the final path.
std::string publish_checkpoint(const std::string& checkpoint_dir, int64_t step, const nlohmann::json& manifest,
                               int64_t keep, const std::function<void(const std::string&)>& published = {});

std::string temporary_checkpoint_path(const std::string& checkpoint_dir, int64_t step);

// Reads indices [OFFSET, OFFSET + LENGTH) along DIM of tensor NAME of the
// checkpoint at PATH (DIM -1: the whole tensor) from whichever saved slices
// overlap them; nullopt when the checkpoint has no such tensor.
std::optional<torch::Tensor> read_tensor_slice(const std::string& path, const nlohmann::json& manifest,
                                               const std::string& name, int64_t dim, int64_t offset, int64_t length);

// The bytes saved by ShardWriter::add_bytes under NAME; nullopt when absent.
std::optional<torch::Tensor> read_checkpoint_bytes(const std::string& path, const nlohmann::json& manifest,
                                                   const std::string& name);

}  // namespace loom
