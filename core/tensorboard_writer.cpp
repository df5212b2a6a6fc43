#include "core/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include "core/crc32c.h"
#include "core/errors.h"

namespace loom {

namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_tag(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

template <typename T>
void put_little_endian(std::string& out, T value) {
  static_assert(std::is_unsigned_v<T>);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_tag(out, field, kFixed64);
  put_little_endian(out, bits);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_tag(out, field, kFixed32);
  put_little_endian(out, bits);
}

// Event's fields (tensorflow/core/util/event.proto) and Summary.Value's (summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5, kEventSessionLog = 7;
constexpr uint32_t kSessionLogStatus = 1, kSessionLogStart = 1;
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// TensorBoard's naming; a second writer within the same second (a quick resume) gets a suffix
// rather than truncating the first one's file.
std::string new_event_file(const std::filesystem::path& dir) {
  const auto seconds = static_cast<int64_t>(now_seconds());
  const std::string base = (dir / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name())).string();
  std::string path = base;
  for (int n = 1; std::filesystem::exists(path); ++n) path = base + "." + std::to_string(n);
  return path;
}

}  // namespace

namespace {

// An Event's wall_time and step, before what it holds.
std::string event_at(double wall_time, int64_t step) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_tag(event, kEventStep, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64: a negative step would take ten bytes, as protobuf's
  return event;
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string entry;
    put_bytes(entry, kValueTag, tag);
    put_float(entry, kValueSimpleValue, value);
    put_bytes(summary, kSummaryValue, entry);
  }
  std::string event = event_at(wall_time, step);
  put_bytes(event, kEventSummary, summary);
  return event;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_tag(session_log, kSessionLogStatus, kVarint);
  put_varint(session_log, kSessionLogStart);
  std::string event = event_at(wall_time, step);
  put_bytes(event, kEventSessionLog, session_log);
  return event;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw_file_error(error.value(), "log.tensorboard: cannot create directory '" + dir + "': " + error.message());
  path_ = new_event_file(dir);
  out_.open(path_, std::ios::binary);
  if (!out_)
    throw_file_error(errno, "log.tensorboard: cannot write event file '" + path_ + "': " + std::strerror(errno));
  write_record(encode_file_version_event(now_seconds()));
}

void TensorBoardWriter::start_session(int64_t step) {
  write_record(encode_session_start_event(now_seconds(), step));
}

void TensorBoardWriter::write(int64_t step, const Scalars& scalars) {
  write_record(encode_scalars_event(now_seconds(), step, scalars));
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string length;
  put_little_endian(length, static_cast<uint64_t>(event.size()));
  std::string header = length;
  put_little_endian(header, mask_crc32c(crc32c(length)));
  std::string footer;
  put_little_endian(footer, mask_crc32c(crc32c(event)));
  out_ << header << event << footer;
  if (!out_.flush()) {
    throw EnvironmentError("cannot write TensorBoard event file '" + path_ + "': " + std::strerror(errno) +
                           " (disk full?)");
  }
}

}  // namespace loom
