#include "launch/make_optimizer.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "core/muon_groups.h"
#include "optim/adamw.h"
#include "optim/fully_sharded_adamw.h"
#include "optim/make_adamw.h"
#include "optim/partitioned_optimizer.h"
#include "optim/unit_sharded_muon.h"
#include "optim/zero_adamw.h"

namespace loom::launch {
namespace {

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

optim::AdamWOptions adamw_options(const Config& config) {
  const auto& t = config.train;
  return optim::AdamWOptions{t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};
}

}  // namespace

bool muon_parameter(const parallel::ParallelParameter& param, const MuonConfig& config) {
  return muon_trains(config, param.name, param.tensor.dim());
}

namespace {

// Refuses (exit 2 on every rank alike) a train.muon.include / exclude pattern that matches no
// parameter of the whole model, and an include that matches a parameter that is not a matrix
// (which only the ranks holding it would see): the ranks' counts are summed over WORLD.
void check_patterns_used(const Config& config, const std::vector<parallel::ParallelParameter>& params,
                         parallel::Communicator& world) {
  std::vector<std::pair<std::string, std::string>> patterns;
  for (const auto& p : name_patterns(config.train.muon.include)) patterns.emplace_back("include", p);
  for (const auto& p : name_patterns(config.train.muon.exclude)) patterns.emplace_back("exclude", p);
  if (patterns.empty()) return;
  const auto n = static_cast<int64_t>(patterns.size());
  std::vector<double> local(2 * patterns.size(), 0.0);  // [matches..., non-matrix includes...]
  for (size_t k = 0; k < patterns.size(); ++k) {
    for (const auto& param : params) {
      if (!name_matches(patterns[k].second, param.name)) continue;
      local[k] += 1.0;
      if (patterns[k].first == "include" && param.tensor.dim() != 2) local[patterns.size() + k] += 1.0;
    }
  }
  auto counts = torch::tensor(local, torch::kFloat64);
  world.all_reduce(counts).wait();
  for (int64_t k = 0; k < n; ++k) {
    const auto& [key, pattern] = patterns[static_cast<size_t>(k)];
    if (counts[n + k].item<double>() > 0) {
      throw InputError("config key 'train.muon.include': '" + pattern +
                       "' matches a parameter that is not a matrix; Muon trains matrices only");
    }
    if (counts[k].item<double>() > 0) continue;
    throw InputError("config key 'train.muon." + key + "': '" + pattern +
                     "' matches no parameter of the model (names as the model registers them, the same at every "
                     "layout: e.g. h.0.attn.proj.weight, h.*.mlp.fc.weight, wte, lm_head)");
  }
}

}  // namespace

optim::MatrixSplit muon_split(const parallel::ParallelParameter& param, const Config& config) {
  if (ends_with(param.name, "attn.qkv.weight")) return {config.model.num_heads, 3};
  if (ends_with(param.name, "attn.kv.weight")) return {config.model.kv_heads(), 2};
  return {};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& config, parallel::GradientSync& sync,
                                                 parallel::ProcessGroups& groups) {
  const auto& t = config.train;
  if (t.optimizer == OptimizerKind::adamw) return optim::make_adamw(sync, adamw_options(config));
  check_patterns_used(config, sync.parameters(), groups.world_comm());
  auto& tp = groups.tp();
  optim::MuonOptions muon;
  muon.momentum = t.muon.momentum;
  muon.nesterov = t.muon.nesterov;
  muon.ns_steps = t.muon.ns_steps;
  muon.ns_dtype = t.muon.ns_dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
  muon.weight_decay = t.muon.weight_decay >= 0 ? t.muon.weight_decay : t.weight_decay;
  muon.lr_scale = t.muon.lr > 0 ? t.muon.lr / t.lr : 1.0;
  // Per part of the synchronisation (dense over dp, experts over expert-dp): AdamW for the rest,
  // then Muon for the blocks' matrices. ZeRO's AdamW keeps its buckets or units whole and leaves
  // Muon's weights alone; Muon's owners (layer-wise, over the part's group) update them.
  const auto& params = sync.parameters();
  std::vector<std::unique_ptr<optim::Optimizer>> parts;
  std::vector<std::pair<size_t, size_t>> where(params.size());
  for (const auto& part : sync.optimizer_parts()) {
    const bool whole_part = part.sharded_buckets || part.units;
    std::vector<torch::Tensor> adamw_params, muon_params;
    std::vector<size_t> muon_in_part;  // Muon's weights by their place in the part
    std::vector<bool> left_alone;
    std::vector<optim::MatrixSplit> splits;
    optim::MuonSharding sharding;
    sharding.tp = &tp;
    if (part.sharded_buckets) sharding.owners = part.group;
    const size_t adamw_part = parts.size(), muon_part = parts.size() + 1;
    for (size_t pos = 0; pos < part.index.size(); ++pos) {
      const size_t i = part.index[pos];
      const auto& param = params[i];
      const bool by_muon = muon_parameter(param, t.muon);
      if (by_muon) {
        where[i] = {muon_part, muon_params.size()};
        muon_params.push_back(param.tensor);
        muon_in_part.push_back(pos);
        splits.push_back(muon_split(param, config));
        sharding.tp_split_dim.push_back(param.tp_split_dim);
        sharding.whole_shape.push_back(param.global_shape);
      }
      if (!by_muon || whole_part) {
        if (!by_muon) where[i] = {adamw_part, adamw_params.size()};
        adamw_params.push_back(param.tensor);
        left_alone.push_back(by_muon);
      }
    }
    if (part.units) {
      parts.push_back(
          std::make_unique<optim::FullyShardedAdamW>(*part.units, *part.group, adamw_options(config), left_alone));
      parts.push_back(
          std::make_unique<optim::UnitShardedMuon>(*part.units, *part.group, muon_in_part, splits, muon, sharding));
    } else if (part.sharded_buckets) {
      parts.push_back(std::make_unique<optim::ZeroAdamW>(adamw_params, *part.sharded_buckets, *part.group,
                                                         adamw_options(config), left_alone));
      parts.push_back(std::make_unique<optim::Muon>(muon_params, splits, muon, sharding));
    } else {
      parts.push_back(optim::make_adamw_part(part, adamw_params, adamw_options(config)));
      parts.push_back(std::make_unique<optim::Muon>(muon_params, splits, muon, sharding));
    }
  }
  return std::make_unique<optim::PartitionedOptimizer>(std::move(parts), std::move(where));
}

}  // namespace loom::launch
