// What an MoE job reports each step (metrics.jsonl "moe"): the router's
// auxiliary losses, tokens per expert summed over every rank, the imbalance
// max/mean per layer, dropped tokens, and each rank's all-to-all bytes. A
// warning names an expert that keeps receiving several times the mean: the
// ep rank holding it is the fabric's hot spot.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/config.h"
#include "models/moe.h"
#include "parallel/process_groups.h"

namespace loom::launch {

// An expert is hot when it receives more than kHotFactor times the mean for kHotSteps steps in a row.
constexpr double kHotFactor = 2.0;
constexpr int kHotSteps = 3;

// The global indices of the model's MoE blocks.
std::vector<int64_t> moe_layers(const Config& config);

class MoEMonitor {
 public:
  // STATS: this rank's MoE layers (of all its pipeline pieces).
  MoEMonitor(const Config& config, std::vector<models::MoEStats*> stats);
  // Collective over the world: sums every rank's statistics of the step and
  // resets them; the record for metrics.jsonl (the same on every rank).
  nlohmann::json collect(parallel::ProcessGroups& groups);
  // The per-layer hot-expert check of one step's tokens per expert; returns
  // the warnings it raises (an expert hot for kHotSteps steps, once per streak).
  std::vector<std::string> check_hot(const std::vector<int64_t>& layers,
                                     const std::vector<std::vector<double>>& tokens_per_expert);

  // DeepSeek-V3's expert biases of every MoE layer of the model (model.moe.bias_update_rate > 0;
  // else empty): collect() moves them by the step's global loads, the same on every rank, and
  // hands this rank's layers theirs. Checkpoints save and restore them (a step N checkpoint
  // holds N updates).
  const std::vector<std::vector<double>>& expert_bias() const { return expert_bias_; }
  // From a checkpoint (SOURCE names it in errors): refused (InputError) when it holds biases the
  // config does not use, or biases of another shape; none kept while the config uses them: zeros.
  void restore_expert_bias(const std::vector<std::vector<double>>& saved, const std::string& source);

 private:
  void hand_out_expert_bias();

  int64_t num_experts_;
  int64_t ep_;                   // parallel.ep: whether a hot expert is also a hot spot of the all-to-all
  std::vector<int64_t> layers_;  // global indices of every MoE layer of the model
  std::vector<models::MoEStats*> stats_;
  std::map<std::pair<int64_t, int64_t>, int> streak_;  // (layer, expert) -> hot steps in a row
  double bias_update_rate_ = 0.0;
  std::vector<std::vector<double>> expert_bias_;  // [layer of layers_][expert]
};

}  // namespace loom::launch
