// Scalars in TensorBoard's event-file format, without TensorFlow or libprotobuf:
// DIR/events.out.tfevents.<unix seconds>.<hostname>, a sequence of records
//   uint64 length | uint32 masked CRC-32C of the length | Event proto | uint32 masked CRC-32C of the proto
// (little-endian), the first Event giving the file version, then one Event per step
// whose Summary holds (tag, simple_value) pairs. TensorBoard reads every such file in a directory.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace loom {

using Scalars = std::vector<std::pair<std::string, float>>;

class TensorBoardWriter {
 public:
  // Creates DIR if needed and starts a new event file there: a resumed run adds a file,
  // which TensorBoard merges with the earlier ones by step.
  explicit TensorBoardWriter(const std::string& dir);
  // One Event at STEP holding every scalar, flushed: a crashed run keeps what it logged.
  void write(int64_t step, const Scalars& scalars);
  // A resumed run trains again from STEP: a SessionLog START there makes TensorBoard drop what
  // earlier files hold from STEP on (its purge of orphaned data), the stopped attempt's points.
  void start_session(int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

// The Event protos, encoded by hand (protobuf wire format); WALL_TIME in seconds since the epoch.
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars);
std::string encode_session_start_event(double wall_time, int64_t step);

}  // namespace loom
