// LibTorch's own profiler (Kineto: host operators and, on a GPU, CUDA kernels through CUPTI)
// around a range of training steps, as Megatron-LM's --profile-step-start/--profile-step-end
// and torchtitan's profiling section do. At the range's end it writes the Chrome trace
// (chrome://tracing or Perfetto) and logs the kernels that took the most device time,
// so a run on a GPU says where its step goes without another tool.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace loom::launch {

class StepProfiler {
 public:
  // Profiles steps first..last (inclusive; first 0: off) and writes the trace to trace_path.
  StepProfiler(int64_t first, int64_t last, std::string trace_path, torch::Device device);
  ~StepProfiler();  // a run that stopped inside the range still writes what it profiled
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  void before_step(int64_t step);
  void after_step(int64_t step);  // after the step's device work is done (the caller synchronises)

 private:
  int64_t first_;
  int64_t last_;
  std::string trace_path_;
  torch::Device device_;
  bool active_ = false;
  void finish(int64_t last_profiled);
};

}  // namespace loom::launch
