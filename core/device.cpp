#include "core/device.h"

#include <torch/version.h>

#include <algorithm>
#include <cctype>

#include "core/cuda_backend.h"
#include "core/errors.h"
#include "core/logging.h"
#ifdef LOOM_WITH_NCCL
#include <nccl.h>
#endif

namespace loom {

torch::Device resolve_train_device(TrainDevice setting, int64_t local_rank, int64_t local_world, int64_t visible_gpus) {
  const bool automatic = setting == TrainDevice::automatic;
  if (setting == TrainDevice::cpu || (automatic && visible_gpus == 0)) return torch::Device(torch::kCPU);
  if (visible_gpus == 0) {
    throw InputError(
        "config key 'train.device': cuda, but this LibTorch sees no GPU (a CPU-only build, or no "
        "device visible); use cpu or auto");
  }
  // auto takes the GPUs only when every local rank gets one of its own; cuda insists.
  if (automatic && local_world > visible_gpus) return torch::Device(torch::kCPU);
  if (local_world > visible_gpus) {
    throw InputError("config key 'train.device': " + to_string(setting) +
                     " puts one rank on each GPU, but this node runs " + std::to_string(local_world) +
                     " ranks and sees " + std::to_string(visible_gpus) + " GPUs (local rank " +
                     std::to_string(local_rank) + "); start at most one rank per GPU, or use cpu");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

torch::Device resolve_train_device(TrainDevice setting, int64_t local_rank, int64_t local_world) {
  if (setting == TrainDevice::cpu) return torch::Device(torch::kCPU);
  // auto where the CUDA runtime sees no GPU stays on the CPU without loading LibTorch's CUDA half
  // (-1: a build without the runtime cannot tell, and asks LibTorch).
  const int64_t runtime_gpus = cuda_runtime_device_count();
  if (setting == TrainDevice::automatic && runtime_gpus == 0) {
    return resolve_train_device(setting, local_rank, local_world, 0);
  }
  const std::string failure = load_torch_cuda();
  if (!failure.empty()) {
    if (setting == TrainDevice::cuda) {
      throw InputError("config key 'train.device': cuda, but LibTorch's CUDA library did not load: " + failure);
    }
    if (runtime_gpus > 0) {
      log::warn(
          "train.device auto: the CUDA runtime sees a GPU, but LibTorch's CUDA library did not load ({}); "
          "training on the CPU",
          failure);
    }
    return torch::Device(torch::kCPU);
  }
  const int64_t visible = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  return resolve_train_device(setting, local_rank, local_world, visible);
}

std::string gpu_name(int64_t index) {
  return cuda_runtime_gpu_name(index);
}

double known_bf16_peak_tflops(const std::string& gpu_name) {
  std::string name = gpu_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  // Data-sheet dense bf16 figures; the SXM parts unless the name says otherwise.
  if (has("H100") || has("H800")) {
    if (has("PCIE")) return 756.0;
    if (has("NVL")) return 835.0;
    return 989.0;
  }
  if (has("H200") || has("GH200")) return has("NVL") ? 835.0 : 989.0;
  if (has("B200")) return 2250.0;
  if (has("A100") || has("A800")) return 312.0;
  if (has("L40S")) return 362.0;
  return 0.0;
}

std::string build_description() {
  std::string text = std::string("LibTorch ") + TORCH_VERSION + ", CUDA: ";
  const std::string cuda = cuda_runtime_version();
  text += cuda.empty() ? "no" : "yes (" + cuda + ")";
  text += ", NCCL: ";
#ifdef LOOM_WITH_NCCL
  text += "yes (" + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + ")";
#else
  text += "no";
#endif
  return text;
}

void use_device(const torch::Device& device) {
  if (device.is_cuda()) cuda_runtime_set_device(device.index());
}

}  // namespace loom
