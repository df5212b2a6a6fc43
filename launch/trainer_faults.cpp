// The Trainer's test faults (--inject-fault): where a rank dies, stalls, slows down, fails or
// overflows, on the first attempt only (launch/commands.h).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <limits>
#include <thread>

#include "core/errors.h"
#include "core/logging.h"
#include "launch/trainer.h"

namespace loom::launch {

std::function<void()> Trainer::save_fault(int64_t step) const {
  if (fault_.rank != groups_.rank() || fault_.step != step) return {};
  if (fault_.kind == "fail_save") {
    // As a full disk fails it (ENOSPC's text, which the save's message explains).
    return [] {
      throw EnvironmentError(std::string("injected fault: writing this rank's checkpoint files failed: ") +
                             std::strerror(ENOSPC));
    };
  }
  if (fault_.kind == "slow_save") {  // a large checkpoint on a slow disk, to the ranks waiting on it
    const auto ms = std::chrono::microseconds(static_cast<int64_t>(fault_.milliseconds * 1000.0));
    return [ms] {
      log::warn("injected fault: writing this rank's checkpoint files takes {} ms longer", ms.count() / 1000.0);
      std::this_thread::sleep_for(ms);
    };
  }
  if (fault_.kind != "kill_in_save") return {};
  return [] {
    log::warn("injected fault: killed halfway through saving a checkpoint");
    std::raise(SIGKILL);
  };
}

std::function<void()> Trainer::resume_fault() const {
  if (fault_.kind != "slow_resume" || fault_.rank != groups_.rank()) return {};
  const auto ms = std::chrono::microseconds(static_cast<int64_t>(fault_.milliseconds * 1000.0));
  return [ms] {  // (on rank 0's checking thread: it holds nothing of the Trainer)
    log::warn("injected fault: checking the checkpoints of this resume takes {} ms longer", ms.count() / 1000.0);
    std::this_thread::sleep_for(ms);
  };
}

void Trainer::maybe_inject_fault(int64_t step) {
  if (fault_.kind == "scale") {
    if (fault_.rank == groups_.rank() && fault_.step == step) plant_scale_fault();
    return;
  }
  // loom diagnose's planted time, from STEP on.
  if (fault_.rank == groups_.rank() && step >= fault_.step) {
    const auto ms = std::chrono::microseconds(static_cast<int64_t>(fault_.milliseconds * 1000.0));
    if (fault_.kind == "straggler") std::this_thread::sleep_for(ms);  // outside any collective: compute to the others
    if (fault_.kind == "slow-data") data_delay_ = ms;
    if (fault_.kind == "delay" && step == fault_.step) {
      log::warn("injected fault: every {} collective of this rank sleeps {} ms first", fault_.group,
                fault_.milliseconds);
      // Rounded up to whole milliseconds: a delay under one is still a delay.
      for (auto& comm : fault_groups()) comm->plant_delay(std::chrono::ceil<std::chrono::milliseconds>(ms));
    }
  }
  if (fault_.kind == "straggler" || fault_.kind == "slow-data" || fault_.kind == "delay") return;
  if (fault_.kind == "slow" && fault_.rank == groups_.rank() && step >= fault_.step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // outside any collective: compute time to the others
    return;
  }
  if (fault_.kind == "kill_in_save" || fault_.kind == "fail_save" || fault_.kind == "slow_save" ||
      fault_.kind == "slow_resume" || fault_.kind == "overflow" || fault_.kind == "slow" ||
      fault_.rank != groups_.rank() || fault_.step != step)
    return;
  log::warn("injected fault: {} at step {}", fault_.kind, step);
  if (fault_.kind == "kill") std::raise(SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

std::vector<parallel::Communicator*> Trainer::fault_groups() const {
  using parallel::GroupKind;
  // dp: the gradient reductions, over dp (x cp) and, for experts, expert-dp (x cp); under HSDP
  // also its shard and replica groups, which carry them.
  std::vector<GroupKind> kinds = {GroupKind::dp_cp,        GroupKind::expert_dp_cp,    GroupKind::dp_shard,
                                  GroupKind::dp_replicate, GroupKind::expert_dp_shard, GroupKind::expert_dp_replicate};
  if (fault_.group != "dp") {
    kinds = {fault_.group == "tp"   ? GroupKind::tp
             : fault_.group == "cp" ? GroupKind::cp
             : fault_.group == "pp" ? GroupKind::pp
                                    : GroupKind::ep};
  }
  std::vector<parallel::Communicator*> comms;
  // Groups of one rank move nothing (an expert-dp of one where dp = ep): a fault there would be no fault.
  for (auto kind : kinds) {
    if (!groups_.has(kind) || groups_.get(kind).size() < 2) continue;
    auto* comm = &groups_.get(kind);  // (without HSDP the shard kinds are the dp-cp groups themselves)
    if (std::find(comms.begin(), comms.end(), comm) == comms.end()) comms.push_back(comm);
  }
  // Under HSDP over Gloo its gathers among the shard's ranks run on a communicator of their own.
  if (fault_.group == "dp") {
    for (auto* comm : groups_.hsdp_later_communicators())
      if (comm->size() >= 2) comms.push_back(comm);
  }
  return comms;
}

void Trainer::plant_scale_fault() const {
  auto fault = std::make_shared<parallel::Communicator::ResultFault>();
  fault->factor = 1.0 + fault_.epsilon;
  // dp: a gradient bucket; pp: an activation or gradient arriving from another stage; the others:
  // whatever the group does first.
  if (fault_.group == "dp") fault->ops = {"all_reduce", "reduce_scatter"};
  if (fault_.group == "pp") fault->ops = {"send_recv"};
  for (auto* comm : fault_groups()) comm->plant(fault);
  log::warn("injected fault: the result of one {} collective of this rank's at this step is scaled by {}", fault_.group,
            fault->factor);
}

double Trainer::backward_loss_scale(int64_t step) const {
  if (fault_.kind == "overflow" && fault_.rank == groups_.rank() && fault_.step == step) {
    log::warn("injected fault: this rank's loss is multiplied by infinity at step {}", step);
    return std::numeric_limits<double>::infinity();
  }
  return scaler_ ? scaler_->scale() : 1.0;
}

}  // namespace loom::launch
