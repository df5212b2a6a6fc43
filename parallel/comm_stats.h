// Counters of every collective: calls, payload bytes and seconds, per group kind
// and per op. One instance per process, shared by its communicators.
//
// Bytes are the payload of the call as this rank sees it: all_reduce and
// broadcast the tensor; all_gather the gathered output; reduce_scatter the
// input; all_to_all the bytes this rank sends; send_recv the bytes sent plus
// received. Groups of one rank move nothing and are not counted.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace loom::parallel {

struct CommCounter {
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0.0;
};

class CommStats {
 public:
  void record_call(const std::string& group, const std::string& op, int64_t bytes);
  void record_time(const std::string& group, const std::string& op, double seconds);
  CommCounter get(const std::string& group, const std::string& op) const;
  // {"dp": {"all_reduce": {"calls": .., "bytes": .., "seconds": ..}}, ...}
  nlohmann::json to_json() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, CommCounter> counters_;
};

}  // namespace loom::parallel
