#include "core/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/errors.h"
#include "core/regular_file.h"

namespace loom {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

template <typename T>
T read_scalar(std::ifstream& in, const std::string& file) {
  T value{};
  in.read(reinterpret_cast<char*>(&value), sizeof(T));
  if (!in) throw InputError("dataset index '" + file + "' is truncated");
  return value;
}

template <typename T>
std::vector<T> read_array(std::ifstream& in, uint64_t count, const std::string& file) {
  std::vector<T> values(count);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(T)));
  if (!in) throw InputError("dataset index '" + file + "' is truncated");
  return values;
}

template <typename T>
void write_scalar(std::ofstream& out, T value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
void widen(const uint8_t* src, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, src + i * sizeof(T), sizeof(T));
    out[i] = static_cast<int64_t>(value);
  }
}

}  // namespace

size_t dtype_size(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::u8:
    case TokenDtype::i8: return 1;
    case TokenDtype::i16:
    case TokenDtype::u16: return 2;
    case TokenDtype::i32:
    case TokenDtype::f32: return 4;
    case TokenDtype::i64:
    case TokenDtype::f64: return 8;
  }
  return 0;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx = prefix + ".idx";
  const std::string bin = prefix + ".bin";
  require_regular_file(idx, "dataset index");
  require_regular_file(bin, "dataset tokens");
  std::ifstream in(idx, std::ios::binary);
  if (!in)
    throw InputError("cannot open dataset index '" + idx + "' (data.path is the prefix of PREFIX.bin and PREFIX.idx)");

  char magic[9];
  in.read(magic, 9);
  if (!in || std::memcmp(magic, kMagic, 9) != 0) {
    throw InputError("'" + idx + "' is not a Megatron-LM indexed dataset (bad magic)");
  }
  const auto version = read_scalar<uint64_t>(in, idx);
  if (version != 1)
    throw InputError("'" + idx + "' has index version " + std::to_string(version) + "; only 1 is supported");
  const auto code = read_scalar<uint8_t>(in, idx);
  if (code < 1 || code > 8) throw InputError("'" + idx + "' has unknown dtype code " + std::to_string(code));
  dtype_ = static_cast<TokenDtype>(code);
  if (dtype_ == TokenDtype::f32 || dtype_ == TokenDtype::f64) {
    throw InputError("'" + idx + "' stores floating-point tokens; token datasets must use an integer dtype");
  }
  const auto sequences = read_scalar<uint64_t>(in, idx);
  const auto documents = read_scalar<uint64_t>(in, idx);
  // The counts must fit the file before anything is allocated for them (a damaged header can claim 2^61).
  std::error_code error;
  const uint64_t idx_bytes = std::filesystem::file_size(idx, error);
  const uint64_t header = 9 + 8 + 1 + 8 + 8;
  const bool fits = !error && sequences <= idx_bytes / 12 && documents <= idx_bytes / 8;
  // (Before the multimodal test: an empty index, 42 bytes, has that layout's size too.)
  if (fits && sequences == 0 && header + documents * 8 == idx_bytes) {
    throw InputError("'" + idx + "' holds no sequences (an empty dataset): there is nothing to train or validate on");
  }
  if (fits && header + sequences * 13 + documents * 8 == idx_bytes) {
    // Megatron-LM's multimodal datasets put a mode byte per sequence (text, image, ...) after the
    // document index; training a text model on their image sequences' ids would be silently wrong.
    throw InputError("'" + idx + "' is a Megatron-LM multimodal index (a mode byte per sequence after the document " +
                     "index), which loom does not train on; write text datasets without --multimodal");
  }
  if (error || sequences > idx_bytes / 12 || documents > idx_bytes / 8 ||
      header + sequences * 12 + documents * 8 != idx_bytes) {
    throw InputError("'" + idx + "' claims " + std::to_string(sequences) + " sequences and " +
                     std::to_string(documents) + " documents, which do not fit its " + std::to_string(idx_bytes) +
                     " bytes exactly (a damaged, truncated or extended index)");
  }
  lengths_ = read_array<int32_t>(in, sequences, idx);
  offsets_ = read_array<int64_t>(in, sequences, idx);
  documents_ = read_array<int64_t>(in, documents, idx);
  // The document index: where each document's sequences begin, rising within [0, sequences]. It
  // indexes the sequences directly (data.split cuts by documents): a damaged entry must not read
  // outside them.
  for (size_t d = 0; d < documents; ++d) {
    const int64_t at = documents_[d], before = d == 0 ? 0 : documents_[d - 1];
    if (at < before || at > static_cast<int64_t>(sequences)) {
      throw InputError("'" + idx + "': document index entry " + std::to_string(d) + " = " + std::to_string(at) +
                       " is outside [" + std::to_string(before) + ", " + std::to_string(sequences) +
                       "] (a damaged index)");
    }
  }

  if (documents > 0 && (documents_.front() != 0 || documents_.back() != static_cast<int64_t>(sequences))) {
    throw InputError("'" + idx + "': the document index runs from " + std::to_string(documents_.front()) + " to " +
                     std::to_string(documents_.back()) + ", not from 0 to the sequence count " +
                     std::to_string(sequences) + " (a damaged index)");
  }

  int fd = ::open(bin.c_str(), O_RDONLY);
  if (fd < 0) throw InputError("cannot open dataset tokens '" + bin + "'");
  struct stat st {};
  ::fstat(fd, &st);
  data_bytes_ = static_cast<size_t>(st.st_size);
  const size_t item = dtype_size(dtype_);
  for (size_t i = 0; i < sequences; ++i) {
    if (lengths_[i] < 0 || offsets_[i] < 0 || offsets_[i] % static_cast<int64_t>(item) != 0 ||
        static_cast<size_t>(offsets_[i]) + static_cast<size_t>(lengths_[i]) * item > data_bytes_) {
      ::close(fd);
      throw InputError("'" + bin + "' does not match its index: sequence " + std::to_string(i) + " at byte " +
                       std::to_string(offsets_[i]) + ", " + std::to_string(lengths_[i]) + " tokens of " +
                       std::to_string(item) + " bytes, in a file of " + std::to_string(data_bytes_) +
                       " bytes (truncated, or a damaged index)");
    }
  }
  // The sequences lie end to end, as Megatron-LM's writer and loom's lay them: an offset that
  // does not follow the sequence before (a damaged index) would read overlapping or skipped tokens.
  for (size_t i = 0; i < sequences; ++i) {
    const int64_t expected =
        i == 0 ? 0 : offsets_[i - 1] + static_cast<int64_t>(lengths_[i - 1]) * static_cast<int64_t>(item);
    if (offsets_[i] != expected) {  // (every length and offset is inside the file: checked above)
      ::close(fd);
      throw InputError("'" + idx + "': sequence " + std::to_string(i) + " starts at byte " +
                       std::to_string(offsets_[i]) + ", not where the sequence before it ends (" +
                       std::to_string(expected) +
                       "): the sequences of an indexed dataset lie end to end (a damaged index)");
    }
  }
  if (data_bytes_ > 0) {
    void* mapped = ::mmap(nullptr, data_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      ::close(fd);
      throw InputError("cannot memory-map '" + bin + "'");
    }
    data_ = static_cast<const uint8_t*>(mapped);
  }
  ::close(fd);
}

IndexedDataset::~IndexedDataset() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), data_bytes_);
}

void IndexedDataset::read(size_t seq, int64_t offset, int64_t count, int64_t* out) const {
  const uint8_t* src = data_ + offsets_[seq] + offset * static_cast<int64_t>(dtype_size(dtype_));
  switch (dtype_) {
    case TokenDtype::u8: return widen<uint8_t>(src, count, out);
    case TokenDtype::i8: return widen<int8_t>(src, count, out);
    case TokenDtype::i16: return widen<int16_t>(src, count, out);
    case TokenDtype::u16: return widen<uint16_t>(src, count, out);
    case TokenDtype::i32: return widen<int32_t>(src, count, out);
    case TokenDtype::i64: return widen<int64_t>(src, count, out);
    case TokenDtype::f32:
    case TokenDtype::f64: break;
  }
}

std::pair<int64_t, int64_t> IndexedDataset::token_id_range() const {
  int64_t low = 0, high = -1;
  std::vector<int64_t> buffer;
  for (size_t seq = 0; seq < lengths_.size(); ++seq) {
    buffer.resize(static_cast<size_t>(lengths_[seq]));
    read(seq, 0, lengths_[seq], buffer.data());
    for (int64_t id : buffer) {
      low = std::min(low, id);
      high = std::max(high, id);
    }
  }
  return {low, high};
}

IndexHeader read_index_header(const std::string& prefix) {
  const std::string idx = prefix + ".idx";
  require_regular_file(idx, "dataset index");
  std::ifstream in(idx, std::ios::binary);
  char magic[9] = {};
  if (!in.read(magic, 9) || std::memcmp(magic, kMagic, 9) != 0) {
    throw InputError("'" + idx + "' is not a Megatron-LM indexed dataset (bad magic)");
  }
  read_scalar<uint64_t>(in, idx);  // the version
  const auto code = read_scalar<uint8_t>(in, idx);
  if (code < 1 || code > 8) throw InputError("'" + idx + "' has unknown dtype code " + std::to_string(code));
  IndexHeader header;
  header.dtype = static_cast<TokenDtype>(code);
  header.sequences = read_scalar<uint64_t>(in, idx);
  return header;
}

bool is_indexed_dataset(const std::string& prefix) {
  try {
    read_index_header(prefix);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype)
    : prefix_(prefix), dtype_(dtype) {
  errno = 0;
  bin_.open(prefix + ".bin.tmp", std::ios::binary | std::ios::trunc);
  if (!bin_) throw_write_error("cannot write '" + prefix + ".bin.tmp'");
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finished_) return;
  bin_.close();
  std::error_code ignored;
  std::filesystem::remove(prefix_ + ".bin.tmp", ignored);
  std::filesystem::remove(prefix_ + ".idx.tmp", ignored);
}

void IndexedDatasetWriter::add_document(const std::vector<int64_t>& tokens) {
  // The index keeps each length in 32 bits: a longer document would wrap to a shorter one.
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InputError("a document of " + std::to_string(tokens.size()) +
                     " tokens is longer than an indexed dataset holds (2^31 - 1): split it (--split-paragraphs, or "
                     "documents of their own)");
  }
  const size_t item = dtype_size(dtype_);
  std::vector<uint8_t> bytes(tokens.size() * item);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = tokens[i];
    switch (dtype_) {
      case TokenDtype::u8: bytes[i] = static_cast<uint8_t>(t); break;
      case TokenDtype::i8: {
        int8_t v = static_cast<int8_t>(t);
        std::memcpy(&bytes[i], &v, 1);
        break;
      }
      case TokenDtype::i16: {
        int16_t v = static_cast<int16_t>(t);
        std::memcpy(&bytes[i * 2], &v, 2);
        break;
      }
      case TokenDtype::u16: {
        uint16_t v = static_cast<uint16_t>(t);
        std::memcpy(&bytes[i * 2], &v, 2);
        break;
      }
      case TokenDtype::i32: {
        int32_t v = static_cast<int32_t>(t);
        std::memcpy(&bytes[i * 4], &v, 4);
        break;
      }
      case TokenDtype::i64: std::memcpy(&bytes[i * 8], &t, 8); break;
      case TokenDtype::f32:
      case TokenDtype::f64: throw InputError("token datasets must use an integer dtype");
    }
  }
  errno = 0;  // a full disk says so here, where the write fails (errno says whose fault: core/errors.h)
  bin_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!bin_) throw_write_error("failed writing '" + prefix_ + ".bin.tmp'");
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  documents_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetWriter::finish() {
  errno = 0;
  bin_.close();
  if (!bin_) throw_write_error("failed writing '" + prefix_ + ".bin.tmp'");
  const std::string idx = prefix_ + ".idx.tmp";
  std::ofstream out(idx, std::ios::binary | std::ios::trunc);
  if (!out) throw_write_error("cannot write '" + idx + "'");
  out.write(kMagic, 9);
  write_scalar<uint64_t>(out, 1);
  write_scalar<uint8_t>(out, static_cast<uint8_t>(dtype_));
  write_scalar<uint64_t>(out, lengths_.size());
  write_scalar<uint64_t>(out, documents_.size());
  out.write(reinterpret_cast<const char*>(lengths_.data()), static_cast<std::streamsize>(lengths_.size() * 4));
  std::vector<int64_t> offsets(lengths_.size());
  int64_t offset = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    offsets[i] = offset;
    offset += static_cast<int64_t>(lengths_[i]) * static_cast<int64_t>(dtype_size(dtype_));
  }
  out.write(reinterpret_cast<const char*>(offsets.data()), static_cast<std::streamsize>(offsets.size() * 8));
  out.write(reinterpret_cast<const char*>(documents_.data()), static_cast<std::streamsize>(documents_.size() * 8));
  out.close();
  if (!out) throw_write_error("failed writing '" + idx + "'");
  // The .bin first: a reader opening PREFIX finds the new .idx only beside the new .bin.
  std::filesystem::rename(prefix_ + ".bin.tmp", prefix_ + ".bin");
  std::filesystem::rename(idx, prefix_ + ".idx");
  finished_ = true;
}

}  // namespace loom
