#include "core/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "core/checkpoint_directory.h"
#include "core/errors.h"
#include "core/logging.h"
#include "core/regular_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "loom-checkpoint-2";
// Written before manifests carried their checksum: still read, checked by key only.
constexpr const char* kFormatWithoutChecksum = "loom-checkpoint-1";

// CRC-32 of DATA continuing from CRC (that of the bytes before it; 0 for none).
uint32_t crc_of(const char* data, size_t size, uint32_t crc_before = 0) {
  uLong crc = crc_before;
  // zlib takes sizes as uInt: feed large buffers in pieces.
  for (size_t done = 0; done < size;) {
    const auto piece = static_cast<uInt>(std::min<size_t>(size - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data + done), piece);
    done += piece;
  }
  return static_cast<uint32_t>(crc);
}

void write_file(const fs::path& path, const char* data, size_t size) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw_write_error("cannot write checkpoint file '" + path.string() + "'");
  out.write(data, static_cast<std::streamsize>(size));
  if (!out.flush()) throw_write_error("cannot write checkpoint file '" + path.string() + "'");
  out.close();
  fsync_path(path.string());
}

// The CRC-32 of PATH's bytes, read in pieces of 16 MiB: a rank's file can be tens of GB, which
// read whole (it was, a byte at a time into a growing vector) took twice its size in memory and
// about 20 s a GB here, while the other ranks waited on a collective bounded by parallel.timeout_s.
// An empty optional: the file could not be read to its end.
std::optional<uint32_t> crc_of_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<char> piece(size_t{16} << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    crc = crc_of(piece.data(), static_cast<size_t>(in.gcount()), crc);
  }
  if (!in.eof()) return std::nullopt;
  return crc;
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
  // A copy even when the slice is already a contiguous CPU float tensor: training goes on changing it.
  auto data = slice.detach().to(torch::kCPU, torch::kFloat32, /*non_blocking=*/false, /*copy=*/true).contiguous();
  const size_t bytes = static_cast<size_t>(data.numel()) * 4;
  entries_.push_back({{"tensor", name},
                      {"global_shape", global_shape},
                      {"dim", dim},
                      {"offset", offset},
                      {"shape", data.sizes().vec()},
                      {"file", file_name_},
                      {"byte_offset", bytes_},
                      {"nbytes", bytes}});
  pieces_.push_back(std::move(data));
  bytes_ += bytes;
}

void ShardWriter::add_bytes(const std::string& name, const torch::Tensor& bytes) {
  auto data = bytes.to(torch::kCPU, torch::kUInt8, /*non_blocking=*/false, /*copy=*/true).contiguous();
  TORCH_CHECK(bytes.scalar_type() == torch::kUInt8, "add_bytes takes a uint8 tensor");
  entries_.push_back(
      {{"tensor", name}, {"dtype", "U8"}, {"file", file_name_}, {"byte_offset", bytes_}, {"nbytes", data.numel()}});
  bytes_ += static_cast<size_t>(data.numel());
  pieces_.push_back(std::move(data));
}

nlohmann::json ShardWriter::finish() {
  const fs::path path = fs::path(directory_) / file_name_;
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw_write_error("cannot write checkpoint file '" + path.string() + "'");
  uint32_t crc = 0;
  for (const auto& piece : pieces_) {
    const auto* data = static_cast<const char*>(piece.data_ptr());
    const size_t size = static_cast<size_t>(piece.nbytes());
    out.write(data, static_cast<std::streamsize>(size));
    crc = crc_of(data, size, crc);
  }
  if (!out.flush()) throw_write_error("cannot write checkpoint file '" + path.string() + "'");
  out.close();
  fsync_path(path.string());
  pieces_.clear();
  return {{"entries", entries_}, {"file", {{"name", file_name_}, {"bytes", bytes_}, {"crc32", crc}}}};
}

namespace {

constexpr const char* kChecksumKey = "manifest_crc32";

uint32_t manifest_checksum(nlohmann::json manifest) {
  manifest.erase(kChecksumKey);
  const std::string text = manifest.dump(1);
  return crc_of(text.data(), text.size());
}

// What reading needs of a manifest, so that an edited or truncated one is
// refused by name here rather than failing deep inside a load (or, worse,
// reading the wrong bytes).
void check_manifest_keys(const nlohmann::json& manifest, const std::string& file) {
  auto need = [&](const nlohmann::json& object, const std::string& key, const std::string& where,
                  bool (nlohmann::json::*is_kind)() const noexcept, const char* kind) -> const nlohmann::json& {
    if (!object.is_object() || !object.contains(key) || !(object.at(key).*is_kind)()) {
      throw InputError("checkpoint manifest '" + file + "': " + where + key + " is missing or not " + kind);
    }
    return object.at(key);
  };
  using J = nlohmann::json;
  const auto fail = [&](const std::string& what) { throw InputError("checkpoint manifest '" + file + "': " + what); };
  for (const char* key : {"step", "consumed_samples", "optimizer_steps"}) {
    if (need(manifest, key, "", &J::is_number_integer, "an integer").get<int64_t>() < 0)
      fail(std::string(key) + " is negative");
  }
  // A step folder's name is its step: a manifest that says another was edited, or copied into it.
  const std::string folder = fs::path(file).parent_path().filename().string();
  if (folder.size() > 5 && folder.size() < 24 && folder.rfind("step_", 0) == 0 &&
      folder.find_first_not_of("0123456789", 5) == std::string::npos &&
      std::stoll(folder.substr(5)) != manifest.at("step").get<int64_t>()) {
    fail("step is " + manifest.at("step").dump() + ", but it is the manifest of folder " + folder);
  }
  const auto& layout = need(manifest, "layout", "", &J::is_object, "an object");
  for (const char* key : {"tp", "pp", "dp", "cp", "ep", "world", "virtual_stages"}) {
    if (layout.contains(key) && (!layout.at(key).is_number_integer() || layout.at(key).get<int64_t>() < 1))
      fail(std::string("layout.") + key + " is " + layout.at(key).dump() + ", not a positive integer");
  }
  if (layout.contains("zero_stage") &&
      (!layout.at("zero_stage").is_number_integer() || layout.at("zero_stage").get<int64_t>() < 0 ||
       layout.at("zero_stage").get<int64_t>() > 3))
    fail("layout.zero_stage is " + layout.at("zero_stage").dump() + ", not 0-3");
  need(manifest, "model", "", &J::is_object, "an object");
  for (const char* key : {"data", "moe_router", "hf_source", "tokenizer"}) {
    if (manifest.contains(key) && !manifest.at(key).is_object() && !manifest.at(key).is_null())
      fail(std::string(key) + " is " + manifest.at(key).dump() + ", not an object");
  }
  const auto& files = need(manifest, "files", "", &J::is_object, "an object");
  for (const auto& [name, info] : files.items()) {
    need(info, "bytes", "files." + name + ".", &J::is_number_unsigned, "a size");
    need(info, "crc32", "files." + name + ".", &J::is_number_unsigned, "a CRC-32");
  }
  auto check_range = [&](const nlohmann::json& entry, const std::string& where) {
    const auto& in = need(entry, "file", where, &J::is_string, "a file name").get<std::string>();
    const auto begin = need(entry, "byte_offset", where, &J::is_number_unsigned, "a byte offset").get<uint64_t>();
    const auto size = need(entry, "nbytes", where, &J::is_number_unsigned, "a size").get<uint64_t>();
    if (!files.contains(in))
      throw InputError("checkpoint manifest '" + file + "': " + where + "file '" + in + "' is not among its files");
    if (begin + size < begin || begin + size > files.at(in).at("bytes").get<uint64_t>()) {
      throw InputError("checkpoint manifest '" + file + "': " + where + "byte_offset + nbytes run past the end of " +
                       in);
    }
  };
  for (const auto& [name, tensor] : need(manifest, "tensors", "", &J::is_object, "an object").items()) {
    const std::string where = "tensors." + name + ".";
    const auto& global = need(tensor, "global_shape", where, &J::is_array, "a shape");
    for (const auto& size : global) {
      if (!size.is_number_unsigned()) fail(where + "global_shape " + global.dump() + " holds other than sizes");
    }
    const auto& slices = need(tensor, "slices", where, &J::is_array, "a list of slices");
    if (slices.empty()) throw InputError("checkpoint manifest '" + file + "': " + where + "slices is empty");
    // Every slice is cut along the same dimension (-1: the tensor whole, one slice), matches the
    // tensor outside it, and the slices tile it: reading fills a tensor of global_shape from them.
    const int64_t rank = static_cast<int64_t>(global.size());
    const auto dim = need(slices.at(0), "dim", where + "slices[].", &J::is_number_integer, "an integer").get<int64_t>();
    if (dim < -1 || dim >= rank) fail(where + "slices[].dim " + std::to_string(dim) + " is not one of its dimensions");
    if (dim == -1 && slices.size() != 1) fail(where + "a tensor saved whole (dim -1) has more than one slice");
    const uint64_t extent = dim >= 0 ? global.at(static_cast<size_t>(dim)).get<uint64_t>() : 0;  // along dim
    std::vector<std::pair<uint64_t, uint64_t>> along;  // each slice's [begin, end) along dim
    for (const auto& slice : slices) {
      if (need(slice, "dim", where + "slices[].", &J::is_number_integer, "an integer").get<int64_t>() != dim)
        fail(where + "its slices are cut along different dimensions");
      const auto offset = need(slice, "offset", where + "slices[].", &J::is_number_integer, "an integer");
      const auto& shape = need(slice, "shape", where + "slices[].", &J::is_array, "a shape");
      check_range(slice, where + "slices[].");
      if (static_cast<int64_t>(shape.size()) != rank)
        fail(where + "slices[].shape " + shape.dump() + " is not of its rank");
      uint64_t elements = 1;
      for (int64_t d = 0; d < rank; ++d) {
        const auto& size = shape.at(static_cast<size_t>(d));
        if (!size.is_number_unsigned() || (d != dim && size != global.at(static_cast<size_t>(d))) ||
            __builtin_mul_overflow(elements, size.get<uint64_t>(), &elements)) {
          fail(where + "slices[].shape " + shape.dump() + " does not fit global_shape " + global.dump());
        }
      }
      if (elements > UINT64_MAX / 4 || elements * 4 != slice.at("nbytes").get<uint64_t>()) {
        throw InputError("checkpoint manifest '" + file + "': " + where + "slices[].nbytes does not match its shape");
      }
      if (dim >= 0) {
        const auto length = shape.at(static_cast<size_t>(dim)).get<uint64_t>();
        if (offset.get<int64_t>() < 0 || offset.get<uint64_t>() > extent || length > extent - offset.get<uint64_t>()) {
          fail(where + "slices[] at offset " + offset.dump() + " of " + shape.dump() + " run outside global_shape " +
               global.dump());
        }
        along.emplace_back(offset.get<uint64_t>(), offset.get<uint64_t>() + length);
      } else if (offset != 0) {
        fail(where + "a tensor saved whole (dim -1) has offset " + offset.dump());
      }
    }
    std::sort(along.begin(), along.end());
    uint64_t end = 0;
    for (const auto& [begin, stop] : along) {
      if (begin != end)
        fail(where + "its slices do not tile it along dim " + std::to_string(dim) + " (a gap or an overlap)");
      end = stop;
    }
    if (dim >= 0 && end != extent) fail(where + "its slices do not cover global_shape " + global.dump());
  }
  for (const auto& [name, blob] : need(manifest, "blobs", "", &J::is_object, "an object").items()) {
    check_range(blob, "blobs." + name + ".");
  }
}

}  // namespace

nlohmann::json read_manifest(const std::string& path) {
  const fs::path file = fs::path(path) / "manifest.json";
  require_regular_file(file.string(), "checkpoint manifest");
  std::ifstream in(file);
  if (!in) {
    // The usual slips: the manifest itself, or checkpoint.dir (or its `latest`) for a step folder.
    std::error_code error;
    std::string hint;
    if (!fs::exists(path, error)) {
      // Most often a step that checkpoint.keep has since deleted: say which ones are there.
      const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
      std::vector<std::string> steps;
      for (const auto& entry : fs::directory_iterator(parent, error)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("step_", 0) == 0 && entry.is_directory(error)) steps.push_back(name);
      }
      std::sort(steps.begin(), steps.end());
      std::string listed;
      for (const auto& step : steps) listed += (listed.empty() ? "" : ", ") + step;
      throw InputError(
          "checkpoint '" + path + "' does not exist" +
          (steps.empty() ? std::string()
                         : " (checkpoint.keep deletes older steps; '" + parent.string() + "' holds " + listed + ")"));
    }
    if (fs::path(path).filename() == "manifest.json" && fs::is_regular_file(path, error)) {
      hint = ": give the step folder that holds it, '" + fs::path(path).parent_path().string() + "'";
    } else if (fs::exists(fs::path(path) / "latest", error) || fs::path(path).filename() == "latest") {
      hint =
          ": that is checkpoint.dir (or its `latest`); give a step folder inside it (step_N), or, to resume, set "
          "checkpoint.dir to it and pass --resume auto";
    }
    throw InputError("checkpoint '" + path + "' has no manifest.json (not a checkpoint, or an unfinished one)" + hint);
  }
  // A directory opens as a stream too, and fails only when read (as a bare std::ios_base::failure).
  if (std::error_code error; !fs::is_regular_file(file, error)) {
    throw InputError("checkpoint manifest '" + file.string() + "' is not a regular file");
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError("checkpoint manifest '" + file.string() + "' is corrupted: " + e.what());
  }
  const std::string format = manifest.is_object() ? manifest.value("format", "") : "";
  if (format == kFormat) {
    if (!manifest.contains(kChecksumKey) || !manifest.at(kChecksumKey).is_number_unsigned()) {
      throw InputError("checkpoint manifest '" + file.string() + "' has no " + kChecksumKey + " (edited?)");
    }
    if (manifest.at(kChecksumKey).get<uint32_t>() != manifest_checksum(manifest)) {
      throw InputError("checkpoint manifest '" + file.string() + "' fails its own CRC-32 check (edited or corrupted)");
    }
  } else if (format != kFormatWithoutChecksum) {
    throw InputError("'" + file.string() + "' is not a " + kFormat + " manifest");
  }
  check_manifest_keys(manifest, file.string());
  return manifest;
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
    std::error_code error;
    if (!fs::exists(file, error)) return "checkpoint file '" + file.string() + "' is missing";
    if (!fs::is_regular_file(file, error)) return "checkpoint file '" + file.string() + "' is not a regular file";
    const auto expected = info.at("bytes").get<uint64_t>();
    const auto size = fs::file_size(file, error);
    if (error) return "checkpoint file '" + file.string() + "' cannot be read: " + error.message();
    if (size != expected) {
      return "checkpoint file '" + file.string() + "' has " + std::to_string(size) + " bytes, the manifest says " +
             std::to_string(expected) + " (truncated?)";
    }
    const auto crc = crc_of_file(file);
    if (!crc) return "checkpoint file '" + file.string() + "' cannot be read";
    if (*crc != info.at("crc32").get<uint32_t>()) {
      return "checkpoint file '" + file.string() + "' fails its CRC-32 check (corrupted)";
    }
  }
  return "";
}

std::string publish_checkpoint(const std::string& checkpoint_dir, int64_t step, const nlohmann::json& manifest,
                               int64_t keep, const std::function<void(const std::string&)>& published) {
  const fs::path temporary = temporary_checkpoint_path(checkpoint_dir, step);
  const fs::path final_path = fs::path(checkpoint_dir) / checkpoint_name(step);
  auto full = manifest;
  full["format"] = kFormat;
  full[kChecksumKey] = manifest_checksum(full);
  const std::string text = full.dump(1);
  write_file(temporary / "manifest.json", text.data(), text.size());
  fsync_path(temporary.string());
  // Something already has this step's name: an older save of the same step, or a folder without a
  // manifest. It is moved out of the way, never deleted (core/checkpoint_directory.h).
  if (fs::exists(final_path)) {
    const bool readable = fs::exists(final_path / "manifest.json");
    const auto moved = set_aside(final_path.string(), readable ? "replaced" : "unreadable");
    log::warn("{} was in the way of this save ({}): set aside as {}", final_path.string(),
              readable ? "an older save of the same step" : "a folder with no manifest.json", moved);
  }
  announce_publish(checkpoint_dir, final_path.string());
  fs::rename(temporary, final_path);
  fsync_path(checkpoint_dir);
  set_latest(checkpoint_dir, final_path.string());
  if (published) published(final_path.string());
  apply_retention(checkpoint_dir, keep);
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
  if (dim >= 0 && saved_dim >= 0 && dim != saved_dim) {
    throw InputError("checkpoint '" + path + "': tensor '" + name + "' was split along dim " +
                     std::to_string(saved_dim) + ", asked for dim " + std::to_string(dim));
  }
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
