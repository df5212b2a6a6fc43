#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/metrics.h"
#include "core/tensorboard_writer.h"
#include "test_helpers.h"

using namespace loom;
namespace fs = std::filesystem;
using loom::test::read_bytes;

// The reader below follows TensorBoard's record format (tensorflow/core/lib/io/record_writer.cc:
// uint64 length, uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked CRC-32C of the
// data, little-endian) and the protobuf wire format of event.proto and summary.proto, written
// from their descriptions rather than from loom's writer.
namespace {

uint64_t little_endian(const std::string& bytes, size_t at, size_t width) {
  if (at + width > bytes.size()) throw std::runtime_error("truncated at byte " + std::to_string(at));
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return value;
}

uint32_t unmask(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

// Every record's data, after checking both checksums.
std::vector<std::string> read_records(const std::string& path) {
  const std::string file = read_bytes(path);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    const uint64_t length = little_endian(file, at, 8);
    const auto length_crc = static_cast<uint32_t>(little_endian(file, at + 8, 4));
    CHECK(unmask(length_crc) == crc32c(file.data() + at, 8));
    const std::string data = file.substr(at + 12, length);
    REQUIRE(data.size() == length);
    const auto data_crc = static_cast<uint32_t>(little_endian(file, at + 12 + length, 4));
    CHECK(unmask(data_crc) == crc32c(data));
    records.push_back(data);
    at += 12 + length + 4;
  }
  REQUIRE(at == file.size());
  return records;
}

struct Field {
  uint32_t number = 0, wire_type = 0;
  uint64_t integer = 0;  // varint, fixed64 and fixed32 values
  std::string bytes;     // length-delimited values
};

uint64_t read_varint(const std::string& bytes, size_t& at) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= bytes.size()) throw std::runtime_error("truncated varint");
    const auto byte = static_cast<unsigned char>(bytes[at++]);
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return value;
  }
  throw std::runtime_error("varint too long");
}

std::vector<Field> read_message(const std::string& bytes) {
  std::vector<Field> fields;
  size_t at = 0;
  while (at < bytes.size()) {
    const uint64_t key = read_varint(bytes, at);
    Field field;
    field.number = static_cast<uint32_t>(key >> 3);
    field.wire_type = static_cast<uint32_t>(key & 7);
    if (field.wire_type == 0) {
      field.integer = read_varint(bytes, at);
    } else if (field.wire_type == 1 || field.wire_type == 5) {
      const size_t width = field.wire_type == 1 ? 8 : 4;
      field.integer = little_endian(bytes, at, width);
      at += width;
    } else if (field.wire_type == 2) {
      const uint64_t length = read_varint(bytes, at);
      if (at + length > bytes.size()) throw std::runtime_error("truncated length-delimited field");
      field.bytes = bytes.substr(at, length);
      at += length;
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(field.wire_type));
    }
    fields.push_back(field);
  }
  return fields;
}

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
  bool has_summary = false;
};

Event decode_event(const std::string& data) {
  Event event;
  for (const auto& field : read_message(data)) {
    if (field.number == 1) {
      REQUIRE(field.wire_type == 1);
      std::memcpy(&event.wall_time, &field.integer, 8);
    } else if (field.number == 2) {
      REQUIRE(field.wire_type == 0);
      event.step = static_cast<int64_t>(field.integer);
    } else if (field.number == 3) {
      REQUIRE(field.wire_type == 2);
      event.file_version = field.bytes;
    } else if (field.number == 5) {
      REQUIRE(field.wire_type == 2);
      event.has_summary = true;
      for (const auto& value : read_message(field.bytes)) {
        REQUIRE(value.number == 1);
        std::string tag;
        float simple_value = std::numeric_limits<float>::quiet_NaN();
        for (const auto& part : read_message(value.bytes)) {
          if (part.number == 1) tag = part.bytes;
          if (part.number == 2) {
            REQUIRE(part.wire_type == 5);
            const auto bits = static_cast<uint32_t>(part.integer);
            std::memcpy(&simple_value, &bits, 4);
          }
        }
        event.scalars.emplace_back(tag, simple_value);
      }
    } else {
      FAIL("unexpected Event field " << field.number);
    }
  }
  return event;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::map<std::string, float> as_map(const Scalars& scalars) {
  return {scalars.begin(), scalars.end()};
}

}  // namespace

TEST_CASE("crc32c: the known check values of CRC-32C", "[tensorboard]") {
  CHECK(crc32c(std::string("123456789")) == 0xE3069283u);
  // RFC 3720 (iSCSI), B.4.
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc32c(std::string(32, '\xFF')) == 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  CHECK(crc32c(ascending) == 0x46DD794Eu);
  CHECK(crc32c(std::string()) == 0u);
  // Continuing across pieces gives the whole's checksum.
  CHECK(crc32c("6789", 4, crc32c("12345", 5)) == 0xE3069283u);
  // Every length and alignment against the definition bit by bit (the 8-byte path and its tail).
  std::string bytes;
  for (int i = 0; i < 300; ++i) bytes.push_back(static_cast<char>((i * 131 + 7) % 256));
  for (size_t start : {0, 1, 3, 8}) {
    for (size_t n = 0; n + start <= bytes.size(); n += 13) {
      uint32_t bitwise = 0xFFFFFFFFu;
      for (size_t i = start; i < start + n; ++i) {
        bitwise ^= static_cast<unsigned char>(bytes[i]);
        for (int bit = 0; bit < 8; ++bit) bitwise = (bitwise & 1u) ? (bitwise >> 1) ^ 0x82F63B78u : bitwise >> 1;
      }
      CHECK(crc32c(bytes.data() + start, n) == ~bitwise);
    }
  }
}

TEST_CASE("crc32c: the mask rotates right by 15 and adds TFRecord's constant", "[tensorboard]") {
  CHECK(mask_crc32c(0) == 0xa282ead8u);
  // 0x00008000 rotated right by 15 is 1.
  CHECK(mask_crc32c(0x00008000u) == 0xa282ead9u);
  for (const uint32_t crc : {0xE3069283u, 0x8A9136AAu, 0xFFFFFFFFu, 1u}) {
    CHECK(mask_crc32c(crc) != crc);
    CHECK(unmask(mask_crc32c(crc)) == crc);
  }
}

TEST_CASE("tensorboard: the event file holds the version, then one Event per step, every record checked",
          "[tensorboard]") {
  const auto dir = test::temp_dir("tensorboard_events") + "/tb";
  const double before = now_seconds();
  std::string path;
  {
    TensorBoardWriter writer(dir);
    path = writer.path();
    writer.write(1, {{"train/loss", 5.25f}, {"train/lr", 3e-4f}});
    writer.write(2, {{"train/loss", 4.875f}, {"val/loss", std::numeric_limits<float>::infinity()}});
    // Each step's record is on disk before the writer goes: a crashed run keeps it.
    CHECK(read_records(path).size() == 3);
    writer.write(300, {});
  }
  const double after = now_seconds();
  CHECK(fs::path(path).parent_path() == fs::path(dir));
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);

  const auto records = read_records(path);
  REQUIRE(records.size() == 4);
  std::vector<Event> events;
  for (const auto& record : records) events.push_back(decode_event(record));
  for (const auto& event : events) {
    CHECK(event.wall_time >= before - 1.0);
    CHECK(event.wall_time <= after + 1.0);
  }
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK_FALSE(events[0].has_summary);
  CHECK(events[1].step == 1);
  CHECK(events[1].scalars == std::vector<std::pair<std::string, float>>{{"train/loss", 5.25f}, {"train/lr", 3e-4f}});
  CHECK(events[2].step == 2);
  REQUIRE(events[2].scalars.size() == 2);
  CHECK(events[2].scalars[1].first == "val/loss");
  CHECK(std::isinf(events[2].scalars[1].second));
  CHECK(events[3].step == 300);  // a two-byte varint
  CHECK(events[3].scalars.empty());
}

TEST_CASE("tensorboard: a second writer in the same directory starts its own file", "[tensorboard]") {
  const auto dir = test::temp_dir("tensorboard_two");
  TensorBoardWriter first(dir), second(dir);
  first.write(1, {{"train/loss", 1.0f}});
  second.write(2, {{"train/loss", 2.0f}});
  CHECK(first.path() != second.path());
  const auto files = event_files(dir);
  REQUIRE(files.size() == 2);
  for (const auto& file : files) CHECK(read_records(file).size() == 2);
}

TEST_CASE("tensorboard: a directory that cannot be made is refused naming it", "[tensorboard]") {
  const auto dir = test::temp_dir("tensorboard_blocked");
  std::ofstream(dir + "/file") << "x";
  CHECK_THROWS_WITH(TensorBoardWriter(dir + "/file/tb"), Catch::Contains(dir + "/file/tb"));
}

TEST_CASE("metrics: a record's scalars, the optional keys only when present", "[tensorboard]") {
  const nlohmann::json step = {
      {"step", 3},
      {"loss", 4.5},
      {"lr", 0.001},
      {"grad_norm", 0.75},
      {"step_ms", 12.0},
      {"tokens_per_s", 2048.0},
      {"consumed_samples", 24},
      {"loss_scale", 65536.0},
      {"memory",
       {{{"rank", 0}, {"params_bytes", 1048576}, {"grads_bytes", 2097152}, {"activation_peak_bytes", -1}},
        {{"rank", 1}, {"params_bytes", 3145728}, {"grads_bytes", 1048576}, {"activation_peak_bytes", -1}}}},
      {"moe",
       {{"layers", {1, 3}},
        {"aux_loss", 1.25},
        {"z_loss", 0.5},
        {"imbalance", {1.5, 2.0}},
        {"max_imbalance", 2.0},
        {"dropped_tokens", 7}}},
      {"time_split",
       {{"compute_ms", 9.5},
        {"data_ms", 0.5},
        {"optimizer_ms", 1.0},
        {"checkpoint_ms", 0.0},
        {"exposed_ms", {{"tp/all_reduce", 0.75}, {"dp/reduce_scatter", 0.25}}}}}};
  const auto scalars = as_map(scalars_of_record(step));
  const std::map<std::string, float> expected{{"train/loss", 4.5f},
                                              {"train/lr", 0.001f},
                                              {"train/grad_norm", 0.75f},
                                              {"train/loss_scale", 65536.0f},
                                              {"perf/step_ms", 12.0f},
                                              {"perf/tokens_per_s", 2048.0f},
                                              {"memory/params_mib", 3.0f},
                                              {"memory/grads_mib", 2.0f},
                                              {"moe/aux_loss", 1.25f},
                                              {"moe/z_loss", 0.5f},
                                              {"moe/max_imbalance", 2.0f},
                                              {"moe/dropped_tokens", 7.0f},
                                              {"moe/imbalance/layer_1", 1.5f},
                                              {"moe/imbalance/layer_3", 2.0f},
                                              {"time/compute_ms", 9.5f},
                                              {"time/data_ms", 0.5f},
                                              {"time/optimizer_ms", 1.0f},
                                              {"time/checkpoint_ms", 0.0f},
                                              {"time/exposed/tp/all_reduce_ms", 0.75f},
                                              {"time/exposed/dp/reduce_scatter_ms", 0.25f}};
  CHECK(scalars == expected);

  // An evaluation-only record, and a step whose loss was not finite (JSON null).
  CHECK(as_map(scalars_of_record({{"step", 10}, {"val_loss", 3.5}, {"val_ppl", 33.1}})) ==
        std::map<std::string, float>{{"val/loss", 3.5f}, {"val/ppl", 33.1f}});
  CHECK(as_map(scalars_of_record({{"step", 11}, {"loss", nullptr}, {"lr", 0.5}, {"avg_loss", 2.5}})) ==
        std::map<std::string, float>{{"train/lr", 0.5f}, {"train/avg_loss", 2.5f}});
}

TEST_CASE("metrics: every record written becomes an Event at its step", "[tensorboard]") {
  const auto dir = test::temp_dir("tensorboard_metrics");
  {
    MetricsWriter metrics(dir + "/metrics.jsonl", std::make_unique<TensorBoardWriter>(dir + "/tensorboard"));
    metrics.write({{"step", 1}, {"loss", 5.0}, {"lr", 0.01}});
    metrics.write({{"step", 2}, {"val_loss", 4.0}});
    metrics.write({{"step", 3}, {"note", "no numbers"}});  // nothing to plot: no Event
  }
  std::ifstream lines(dir + "/metrics.jsonl");
  int count = 0;
  for (std::string line; std::getline(lines, line);) ++count;
  CHECK(count == 3);
  const auto files = event_files(dir + "/tensorboard");
  REQUIRE(files.size() == 1);
  const auto records = read_records(files[0]);
  REQUIRE(records.size() == 3);
  const auto first = decode_event(records[1]), second = decode_event(records[2]);
  CHECK(first.step == 1);
  CHECK(as_map(first.scalars) == std::map<std::string, float>{{"train/loss", 5.0f}, {"train/lr", 0.01f}});
  CHECK(second.step == 2);
  CHECK(as_map(second.scalars) == std::map<std::string, float>{{"val/loss", 4.0f}});
}

TEST_CASE("metrics.jsonl: a torn last row is cut on open, and a resume moves the retrained steps' rows aside",
          "[metrics]") {
  const auto dir = test::temp_dir("metrics_rows");
  const std::string path = dir + "/metrics.jsonl";
  {
    MetricsWriter metrics(path);
    for (int64_t step = 1; step <= 5; ++step) metrics.write({{"step", step}, {"loss", 1.0 / step}});
  }
  std::ofstream(path, std::ios::app) << R"({"step": 6, "lo)";  // a full disk, or a kill, mid-row
  auto lines = [](const std::string& file) {
    std::vector<nlohmann::json> rows;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));  // throws if torn
    return rows;
  };
  {
    MetricsWriter metrics(path);
    CHECK(lines(path).size() == 5);
    metrics.continue_after(3);  // resumed from step 3: steps 4 and 5 are trained again
    metrics.write({{"step", 4}, {"loss", 0.3}});
  }
  const auto rows = lines(path);
  REQUIRE(rows.size() == 4);
  CHECK(rows.back().at("step") == 4);
  CHECK(rows.back().at("loss") == 0.3);
  const auto aside = lines(dir + "/metrics.superseded.jsonl");
  REQUIRE(aside.size() == 2);
  CHECK(aside.front().at("step") == 4);
  CHECK(aside.back().at("step") == 5);
  // A last row with its newline but not JSON is torn too.
  std::ofstream(path, std::ios::app) << "{\"step\": 5, \n";
  {
    MetricsWriter again(path);
    CHECK(lines(path).size() == 4);
  }
  // A job killed after moving rows aside but before rewriting metrics.jsonl: the next start moves
  // only rows the aside file does not hold (step 4's new row), not step 4's old one again.
  {
    std::ofstream(dir + "/metrics.superseded.jsonl", std::ios::app) << lines(path).back().dump() << "\n";
    MetricsWriter metrics(path);
    metrics.continue_after(3);
  }
  const auto moved = lines(dir + "/metrics.superseded.jsonl");
  REQUIRE(moved.size() == 3);
  CHECK(moved.back().at("loss") == 0.3);
  CHECK(lines(path).size() == 3);
  fs::remove_all(dir);
}
