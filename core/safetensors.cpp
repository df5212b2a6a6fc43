#include "core/safetensors.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace loom {
namespace {

torch::ScalarType dtype_of(const std::string& name, const std::string& path, const std::string& tensor) {
  if (name == "F32") return torch::kFloat32;
  if (name == "F16") return torch::kFloat16;
  if (name == "BF16") return torch::kBFloat16;
  throw InputError("safetensors file '" + path + "': tensor '" + tensor + "' has dtype " + name +
                   "; loom reads F32, F16 and BF16");
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(tensor.scalar_type() == torch::kFloat32, "safetensors writer: ", name, " is not float32");
    const int64_t bytes = tensor.numel() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError("cannot write '" + temporary + "'");
    const uint64_t length = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, tensor] : tensors) {
      auto data = tensor.to(torch::kCPU).contiguous();
      out.write(static_cast<const char*>(data.data_ptr()), static_cast<std::streamsize>(data.numel() * 4));
    }
    if (!out.flush()) throw InputError("cannot write '" + temporary + "' (disk full?)");
  }
  std::filesystem::rename(temporary, path);
}

std::map<std::string, torch::Tensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read safetensors file '" + path + "'");
  const auto file_size = static_cast<uint64_t>(std::filesystem::file_size(path));
  unsigned char length_bytes[8];
  if (!in.read(reinterpret_cast<char*>(length_bytes), 8))
    throw InputError("'" + path + "' is not a safetensors file (too short)");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  if (length > file_size - 8)
    throw InputError("'" + path + "' is not a safetensors file (header longer than the file)");
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InputError("'" + path + "' has an unreadable safetensors header: " + e.what());
  }
  const uint64_t data_start = 8 + length;
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const auto dtype = dtype_of(info.at("dtype").get<std::string>(), path, name);
      const auto shape = info.at("shape").get<std::vector<int64_t>>();
      const auto range = info.at("data_offsets").get<std::vector<uint64_t>>();
      auto tensor = torch::empty(shape, torch::TensorOptions().dtype(dtype));
      const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
      if (range.size() != 2 || range[1] - range[0] != bytes || data_start + range[1] > file_size) {
        throw InputError("'" + path + "': tensor '" + name +
                         "' has a byte range that does not fit its shape or the file");
      }
      in.seekg(static_cast<std::streamoff>(data_start + range[0]));
      in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(bytes));
      if (!in) throw InputError("'" + path + "': cannot read tensor '" + name + "'");
      out[name] = tensor.to(torch::kFloat32);
    } catch (const nlohmann::json::exception& e) {
      throw InputError("'" + path + "': tensor '" + name + "' has a malformed header entry: " + e.what());
    }
  }
  return out;
}

}  // namespace loom
