#include "parallel/comm_stats.h"

namespace loom::parallel {

void CommStats::record_call(const std::string& group, const std::string& op, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& c = counters_[{group, op}];
  c.calls += 1;
  c.bytes += bytes;
}

void CommStats::record_time(const std::string& group, const std::string& op, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_[{group, op}].seconds += seconds;
}

CommCounter CommStats::get(const std::string& group, const std::string& op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counters_.find({group, op});
  return it == counters_.end() ? CommCounter{} : it->second;
}

nlohmann::json CommStats::to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, c] : counters_) {
    out[key.first][key.second] = {{"calls", c.calls}, {"bytes", c.bytes}, {"seconds", c.seconds}};
  }
  return out;
}

void CommStats::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.clear();
}

}  // namespace loom::parallel
