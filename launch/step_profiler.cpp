#include "launch/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/logging.h"

namespace loom::launch {

namespace {

using torch::profiler::impl::ActivityType;

std::set<ActivityType> activities(const torch::Device& device) {
  std::set<ActivityType> kinds{ActivityType::CPU};
  if (device.is_cuda()) kinds.insert(ActivityType::CUDA);
  return kinds;
}

// The events that ran on the GPU (kernels, copies, memsets) summed by name: the twenty that took
// the most time, per step and as a share of the device's busy time. (On a CPU the host operators
// nest, so a flat sum would count them twice: the trace shows them.)
void log_largest_kernels(const std::vector<torch::autograd::profiler::KinetoEvent>& events, int64_t steps) {
  std::map<std::string, std::pair<double, int64_t>> by_name;  // microseconds, calls
  double total_us = 0.0;
  for (const auto& e : events) {
    if (e.deviceType() == c10::DeviceType::CPU) continue;
    const double us = static_cast<double>(e.durationNs()) / 1000.0;
    auto& [sum, calls] = by_name[e.name()];
    sum += us;
    ++calls;
    total_us += us;
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  const double per_step = 1000.0 * static_cast<double>(steps);
  log::info("profile: the GPU was busy {:.2f} ms per step over {} step(s); the largest:", total_us / per_step, steps);
  for (size_t i = 0; i < rows.size() && i < 20; ++i) {
    std::string name = rows[i].first;
    if (name.size() > 110) name = name.substr(0, 107) + "...";
    log::info("profile: {:7.2f} ms/step {:5.1f}% {:6} calls  {}", rows[i].second.first / per_step,
              total_us > 0 ? 100.0 * rows[i].second.first / total_us : 0.0, rows[i].second.second, name);
  }
}

}  // namespace

StepProfiler::StepProfiler(int64_t first, int64_t last, std::string trace_path, torch::Device device)
    : first_(first), last_(last), trace_path_(std::move(trace_path)), device_(device) {
  if (first_ > 0) {
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    torch::autograd::profiler::prepareProfiler(config, activities(device_));
  }
}

void StepProfiler::before_step(int64_t step) {
  if (first_ <= 0 || step != first_) return;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  torch::autograd::profiler::enableProfiler(config, activities(device_));
  active_ = true;
}

StepProfiler::~StepProfiler() {
  if (!active_) return;
  try {
    finish(-1);
  } catch (const std::exception& e) {  // disabling the profiler itself failed: never throw from here
    log::warn("profile: the trace was not written: {}", e.what());
  }
}

void StepProfiler::after_step(int64_t step) {
  if (active_ && step >= last_) finish(step);
}

void StepProfiler::finish(int64_t step) {
  active_ = false;
  auto result = torch::autograd::profiler::disableProfiler();
  if (device_.is_cuda() && step >= first_) log_largest_kernels(result->events(), step - first_ + 1);
  try {
    result->save(trace_path_);
  } catch (const std::exception& e) {
    // A diagnostic that cannot be written (a full disk) must not end the training run.
    log::warn("profile: the trace was not written to {}: {}", trace_path_, e.what());
    return;
  }
  log::info("profile: steps from {} traced to {}", first_, trace_path_);
}

}  // namespace loom::launch
