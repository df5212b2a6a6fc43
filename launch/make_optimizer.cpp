#include "launch/make_optimizer.h"

#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/make_adamw.h"
#include "optim/partitioned_optimizer.h"

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

bool muon_parameter(const parallel::ParallelParameter& param) {
  return param.name.rfind("h.", 0) == 0 && param.tensor.dim() == 2 && param.name.find("router") == std::string::npos &&
         !param.tied_copy;
}

optim::MatrixSplit muon_split(const parallel::ParallelParameter& param, const Config& config) {
  if (ends_with(param.name, "attn.qkv.weight")) return {config.model.num_heads, 3};
  if (ends_with(param.name, "attn.kv.weight")) return {config.model.kv_heads(), 2};
  return {};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& config, parallel::GradientSync& sync) {
  const auto& t = config.train;
  if (t.optimizer == OptimizerKind::adamw) return optim::make_adamw(sync, adamw_options(config));
  // Muon: every weight whole on its rank (launch/supported_combinations.cpp refuses the rest).
  std::vector<torch::Tensor> adamw_params, muon_params;
  std::vector<optim::MatrixSplit> splits;
  std::vector<size_t> part_of;
  for (const auto& param : sync.parameters()) {
    if (muon_parameter(param)) {
      muon_params.push_back(param.tensor);
      splits.push_back(muon_split(param, config));
      part_of.push_back(1);
    } else {
      adamw_params.push_back(param.tensor);
      part_of.push_back(0);
    }
  }
  optim::MuonOptions muon;
  muon.momentum = t.muon.momentum;
  muon.nesterov = t.muon.nesterov;
  muon.ns_steps = t.muon.ns_steps;
  muon.weight_decay = t.muon.weight_decay >= 0 ? t.muon.weight_decay : t.weight_decay;
  muon.lr_scale = t.muon.lr > 0 ? t.muon.lr / t.lr : 1.0;
  std::vector<std::unique_ptr<optim::Optimizer>> parts;
  parts.push_back(std::make_unique<optim::AdamW>(adamw_params, adamw_options(config)));
  parts.push_back(std::make_unique<optim::Muon>(muon_params, splits, muon));
  return std::make_unique<optim::PartitionedOptimizer>(std::move(parts), part_of);
}

}  // namespace loom::launch
