#include "core/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/errors.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "loom-checkpoint-1";

uint32_t crc_of(const char* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes sizes as uInt: feed large buffers in pieces.
  for (size_t done = 0; done < size;) {
    const auto piece = static_cast<uInt>(std::min<size_t>(size - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data + done), piece);
    done += piece;
  }
  return static_cast<uint32_t>(crc);
}

// Data on disk before the rename that publishes it: a crash may not leave a
// manifest pointing at data still in the page cache.
void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_file(const fs::path& path, const char* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError("cannot write checkpoint file '" + path.string() + "'");
  out.write(data, static_cast<std::streamsize>(size));
  if (!out.flush()) throw InputError("cannot write checkpoint file '" + path.string() + "' (disk full?)");
  out.close();
  fsync_path(path);
}

std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read checkpoint file '" + path.string() + "'");
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

std::string temporary_checkpoint_path(const std::string& checkpoint_dir, int64_t step) {
  return (fs::path(checkpoint_dir) / ("." + checkpoint_name(step) + ".tmp")).string();
}

ShardWriter::ShardWriter(std::string directory, std::string file_name)
    : directory_(std::move(directory)), file_name_(std::move(file_name)) {}

void ShardWriter::add(const std::string& name, const std::vector<int64_t>& global_shape, int64_t dim, int64_t offset,
                      const torch::Tensor& slice) {
  auto data = slice.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const size_t bytes = static_cast<size_t>(data.numel()) * 4;
  entries_.push_back({{"tensor", name},
                      {"global_shape", global_shape},
                      {"dim", dim},
                      {"offset", offset},
                      {"shape", data.sizes().vec()},
                      {"file", file_name_},
                      {"byte_offset", data_.size()},
                      {"nbytes", bytes}});
  const char* begin = static_cast<const char*>(data.data_ptr());
  data_.insert(data_.end(), begin, begin + bytes);
}

void ShardWriter::add_bytes(const std::string& name, const torch::Tensor& bytes) {
  auto data = bytes.to(torch::kCPU).contiguous();
  TORCH_CHECK(data.scalar_type() == torch::kUInt8, "add_bytes takes a uint8 tensor");
  entries_.push_back({{"tensor", name},
                      {"dtype", "U8"},
                      {"file", file_name_},
                      {"byte_offset", data_.size()},
                      {"nbytes", data.numel()}});
  const char* begin = static_cast<const char*>(data.data_ptr());
  data_.insert(data_.end(), begin, begin + data.numel());
}

nlohmann::json ShardWriter::finish() {
  write_file(fs::path(directory_) / file_name_, data_.data(), data_.size());
  return {{"entries", entries_},
          {"file", {{"name", file_name_}, {"bytes", data_.size()}, {"crc32", crc_of(data_.data(), data_.size())}}}};
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointInfo> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !fs::exists(entry.path() / "manifest.json")) continue;
    try {
      out.push_back({std::stoll(name.substr(5)), entry.path().string()});
    } catch (const std::exception&) {
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

nlohmann::json read_manifest(const std::string& path) {
  const fs::path file = fs::path(path) / "manifest.json";
  std::ifstream in(file);
  if (!in) throw InputError("checkpoint '" + path + "' has no manifest.json (not a checkpoint, or an unfinished one)");
  try {
    auto manifest = nlohmann::json::parse(in);
    if (manifest.value("format", "") != kFormat)
      throw InputError("'" + file.string() + "' is not a " + kFormat + " manifest");
    return manifest;
  } catch (const nlohmann::json::exception& e) {
    throw InputError("checkpoint manifest '" + file.string() + "' is corrupted: " + e.what());
  }
}

std::string verify_checkpoint(const std::string& path) {
  nlohmann::json manifest;
  try {
    manifest = read_manifest(path);
  } catch (const InputError& e) {
    return e.what();
  }
  for (const auto& [name, info] : manifest.at("files").items()) {
    const fs::path file = fs::path(path) / name;
    if (!fs::exists(file)) return "checkpoint file '" + file.string() + "' is missing";
    const auto expected = info.at("bytes").get<uint64_t>();
    if (fs::file_size(file) != expected) {
      return "checkpoint file '" + file.string() + "' has " + std::to_string(fs::file_size(file)) +
             " bytes, the manifest says " + std::to_string(expected) + " (truncated?)";
    }
    const auto data = read_file(file);
    if (crc_of(data.data(), data.size()) != info.at("crc32").get<uint32_t>()) {
      return "checkpoint file '" + file.string() + "' fails its CRC-32 check (corrupted)";
    }
  }
  return "";
}

std::string publish_checkpoint(const std::string& checkpoint_dir, int64_t step, const nlohmann::json& manifest,
                               int64_t keep) {
  const fs::path temporary = temporary_checkpoint_path(checkpoint_dir, step);
  const fs::path final_path = fs::path(checkpoint_dir) / checkpoint_name(step);
  auto full = manifest;
  full["format"] = kFormat;
  const std::string text = full.dump(1);
  write_file(temporary / "manifest.json", text.data(), text.size());
  fsync_path(temporary);
  std::error_code ignore;
  if (fs::exists(final_path)) fs::remove_all(final_path, ignore);  // an older save of the same step
  fs::rename(temporary, final_path);
  fsync_path(checkpoint_dir);
  const std::string latest = checkpoint_name(step) + "\n";
  write_file(fs::path(checkpoint_dir) / "latest.tmp", latest.data(), latest.size());
  fs::rename(fs::path(checkpoint_dir) / "latest.tmp", fs::path(checkpoint_dir) / "latest");
  fsync_path(checkpoint_dir);
  const auto all = list_checkpoints(checkpoint_dir);
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) fs::remove_all(all[i].path, ignore);
  return final_path.string();
}

std::optional<torch::Tensor> read_tensor_slice(const std::string& path, const nlohmann::json& manifest,
                                               const std::string& name, int64_t dim, int64_t offset, int64_t length) {
  auto it = manifest.at("tensors").find(name);
  if (it == manifest.at("tensors").end()) return std::nullopt;
  const auto global = it->at("global_shape").get<std::vector<int64_t>>();
  const auto& slices = it->at("slices");
  // Every slice of a tensor is cut along the same dimension (-1: saved whole).
  const int64_t saved_dim = slices.at(0).at("dim").get<int64_t>();
  TORCH_CHECK(dim < 0 || saved_dim < 0 || dim == saved_dim, "checkpoint tensor ", name, " was split along dim ",
              saved_dim, ", asked for dim ", dim);
  const int64_t d = dim >= 0 ? dim : saved_dim;  // the dimension the copy works along; -1: whole
  const int64_t want_begin = dim >= 0 ? offset : 0;
  const int64_t want_end = dim >= 0 ? offset + length : (d >= 0 ? global[static_cast<size_t>(d)] : 1);
  auto shape = global;
  if (d >= 0) shape[static_cast<size_t>(d)] = want_end - want_begin;
  auto out = torch::empty(shape, torch::kFloat32);
  int64_t covered = 0;
  for (const auto& slice : slices) {
    auto data = torch::empty(slice.at("shape").get<std::vector<int64_t>>(), torch::kFloat32);
    std::ifstream in(fs::path(path) / slice.at("file").get<std::string>(), std::ios::binary);
    in.seekg(slice.at("byte_offset").get<std::streamoff>());
    in.read(static_cast<char*>(data.data_ptr()), slice.at("nbytes").get<std::streamsize>());
    if (!in) throw InputError("cannot read tensor '" + name + "' from checkpoint '" + path + "'");
    if (d < 0) {
      out.copy_(data);
      covered = 1;
      continue;
    }
    const int64_t begin = saved_dim >= 0 ? slice.at("offset").get<int64_t>() : 0;
    const int64_t end = begin + data.size(d);
    const int64_t lo = std::max(begin, want_begin), hi = std::min(end, want_end);
    if (lo >= hi) continue;
    out.narrow(d, lo - want_begin, hi - lo).copy_(data.narrow(d, lo - begin, hi - lo));
    covered += hi - lo;
  }
  if (covered != want_end - want_begin) {
    throw InputError("checkpoint '" + path + "' does not hold all of tensor '" + name + "' (" +
                     std::to_string(covered) + " of " + std::to_string(want_end - want_begin) + " indices)");
  }
  return out;
}

std::optional<torch::Tensor> read_checkpoint_bytes(const std::string& path, const nlohmann::json& manifest,
                                                   const std::string& name) {
  auto it = manifest.at("blobs").find(name);
  if (it == manifest.at("blobs").end()) return std::nullopt;
  auto out = torch::empty({it->at("nbytes").get<int64_t>()}, torch::kUInt8);
  std::ifstream in(fs::path(path) / it->at("file").get<std::string>(), std::ios::binary);
  in.seekg(it->at("byte_offset").get<std::streamoff>());
  in.read(static_cast<char*>(out.data_ptr()), out.numel());
  if (!in) throw InputError("cannot read '" + name + "' from checkpoint '" + path + "'");
  return out;
}

}  // namespace loom
