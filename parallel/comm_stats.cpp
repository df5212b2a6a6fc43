#include "parallel/comm_stats.h"

#include "parallel/line_fit.h"

namespace loom::parallel {

void CommStats::record_call(const std::string& group, const std::string& op, int64_t bytes,
                            const std::vector<std::pair<int64_t, int64_t>>& sends) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& c = counters_[{group, op}];
  c.calls += 1;
  c.bytes += bytes;
  auto& by_peer = sent_to_by_op_[{group, op}];
  for (const auto& [peer, sent] : sends) {
    c.sent += sent;
    sent_to_[peer] += sent;
    by_peer[peer] += sent;
  }
}

std::map<std::pair<std::string, std::string>, std::map<int64_t, int64_t>> CommStats::sent_to_by_op() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sent_to_by_op_;
}

void CommStats::record_time(const std::string& group, const std::string& op, double seconds, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_[{group, op}].seconds += seconds;
  auto& r = regressions_[op];
  const double x = static_cast<double>(bytes);
  r.n += 1;
  r.x += x;
  r.y += seconds;
  r.xx += x * x;
  r.xy += x * seconds;
}

void CommStats::record_blocked(const std::string& group, const std::string& op, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  blocked_s_ += seconds;
  blocked_by_op_[{group, op}] += seconds;
}

std::map<std::pair<std::string, std::string>, double> CommStats::blocked_by_op() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocked_by_op_;
}

double CommStats::blocked_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocked_s_;
}

CommCounter CommStats::get(const std::string& group, const std::string& op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counters_.find({group, op});
  return it == counters_.end() ? CommCounter{} : it->second;
}

std::map<std::pair<std::string, std::string>, CommCounter> CommStats::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

std::map<int64_t, int64_t> CommStats::sent_to() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sent_to_;
}

std::map<std::string, AlphaBetaFit> CommStats::fits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, AlphaBetaFit> out;
  for (const auto& [op, r] : regressions_) {
    // With sizes all alike the slope is noise, so only alpha (the mean) is reported.
    const auto line = fit_line(r.n, r.x, r.y, r.xx, r.xy);
    out[op] = AlphaBetaFit{static_cast<int64_t>(r.n), line.alpha, line.beta};
  }
  return out;
}

nlohmann::json CommStats::to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, c] : counters_) {
    out[key.first][key.second] = {{"calls", c.calls}, {"bytes", c.bytes}, {"sent", c.sent}, {"seconds", c.seconds}};
  }
  return out;
}

void CommStats::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.clear();
  sent_to_.clear();
  sent_to_by_op_.clear();
  regressions_.clear();
}

}  // namespace loom::parallel
