#include "launch/supported_combinations.h"

#include <string>

#include "core/errors.h"

namespace loom::launch {

void require_supported(const Config& c, const torch::Device& device, int64_t world) {
  auto unsupported = [](const std::string& key, const std::string& value) {
    return InputError("config key '" + key + "': " + value +
                      " is valid but not implemented in this version of loom; training supports tp, pp, dp, "
                      "sequence_parallel, virtual_stages, checkpoints, zero_stage 0-3, ep with MoE, "
                      "precision fp32, bf16 and fp16");
  };
  const auto& p = c.parallel;
  if (p.zero_stage >= 2 && p.grad_reduce_dtype != GradReduceDtype::fp32) {
    throw InputError("config key 'parallel.grad_reduce_dtype': " + to_string(p.grad_reduce_dtype) +
                     " applies to zero_stage 0 and 1; stages 2 and 3 reduce gradients in fp32");
  }
  if (c.train.precision == TrainPrecision::fp16 && c.model.moe.enabled()) {
    // The MoE auxiliary losses inject their gradient at a fixed scale, which dynamic loss scaling would not reach.
    throw unsupported("train.precision", "fp16 with model.moe (use bf16)");
  }
  if (p.backend == CommBackend::nccl && !device.is_cuda()) {
    throw InputError(
        "config key 'parallel.backend': nccl moves GPU tensors, but this run trains on the CPU "
        "(train.device " +
        to_string(c.train.device) + "; a CUDA build of LibTorch and a GPU are needed); use gloo");
  }
  if (!device.is_cuda()) return;
#ifndef LOOM_WITH_NCCL
  if (world > 1) {
    throw InputError(
        "config key 'train.device': cuda with several ranks needs the NCCL communicator, which this "
        "build of loom left out (CUDA or NCCL not found at configure time)");
  }
#endif
  if (p.backend == CommBackend::gloo && world > 1) {
    throw InputError("config key 'parallel.backend': gloo moves CPU tensors; with train.device cuda use nccl or auto");
  }
  // Not yet on GPUs: said here rather than failing inside a step.
  if (p.zero_stage >= 2 && p.dp * p.cp > 1) {
    // ZeRO-2/3 units (sharded over dp x cp) free and regrow parameter storage in place, which
    // parallel/fully_sharded.cpp does for CPU storage.
    throw unsupported("parallel.zero_stage", std::to_string(p.zero_stage) + " on train.device cuda (0 and 1 are)");
  }
}

void check_fault_injection(const FaultInjection& fault, const Config& config, const parallel::RankGrid& grid) {
  if (fault.rank >= grid.world()) {
    throw InputError("--inject-fault rank " + std::to_string(fault.rank) + " is not below the world size");
  }
  // A fault that can never fire would pass as a test of nothing.
  const std::string named =
      "--inject-fault " + std::to_string(fault.rank) + ":" + std::to_string(fault.step) + ":" + fault.kind + ": ";
  if (fault.step > config.train.steps) {
    throw InputError(named + "step " + std::to_string(fault.step) +
                     " is past the run's last (train.steps = " + std::to_string(config.train.steps) + ")");
  }
  if (config.train.exit_after > 0 && fault.step > config.train.exit_after) {
    throw InputError(named + "step " + std::to_string(fault.step) +
                     " is past where the run stops (train.exit_after = " + std::to_string(config.train.exit_after) +
                     ")");
  }
  if (fault.kind == "slow_resume" && fault.rank != 0) {
    throw InputError(named + "only rank 0 checks the checkpoints of a resume: give RANK 0");
  }
  if (fault.kind == "kill_in_save" || fault.kind == "fail_save" || fault.kind == "slow_save") {
    const auto& c = config.checkpoint;
    const bool saves = !c.dir.empty() && (fault.step == config.train.steps || fault.step == config.train.exit_after ||
                                          (c.interval > 0 && fault.step % c.interval == 0));
    if (!saves) {
      throw InputError(named + "step " + std::to_string(fault.step) + " saves no checkpoint (checkpoint.dir '" + c.dir +
                       "', checkpoint.interval = " + std::to_string(c.interval) + ", train.steps = " +
                       std::to_string(config.train.steps) + "); pick a step that saves, or the fault never fires");
    }
  }
  if (fault.kind == "scale" || fault.kind == "delay") {
    const auto& s = grid.sizes();
    const int64_t size = fault.group == "tp"   ? s.tp
                         : fault.group == "cp" ? s.cp
                         : fault.group == "pp" ? s.pp
                         : fault.group == "ep" ? config.parallel.ep
                                               : s.dp * s.cp;  // gradients are reduced over dp x cp
    if (size < 2) {
      throw InputError("--inject-fault " + std::to_string(fault.rank) + ":" + std::to_string(fault.step) + ":" +
                       fault.kind + ":" + fault.group + ": this layout has no " + fault.group + " group (parallel." +
                       fault.group + " is 1)");
    }
    return;
  }
  if (fault.kind != "overflow") return;
  if (config.train.precision != TrainPrecision::fp16) {
    throw InputError("--inject-fault overflow tests fp16 loss scaling: it needs train.precision fp16, not " +
                     to_string(config.train.precision));
  }
  if (grid.coords(fault.rank).pp != config.parallel.pp - 1) {
    throw InputError("--inject-fault " + std::to_string(fault.rank) +
                     ":STEP:overflow: the overflow is injected through the loss, which only the last pipeline "
                     "stage holds; pick one of its ranks");
  }
}

}  // namespace loom::launch
