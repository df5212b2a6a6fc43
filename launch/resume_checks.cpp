#include "launch/resume_checks.h"

#include <fmt/format.h>

#include <vector>

#include "launch/data_record.h"
#include "launch/model_record.h"

namespace loom::launch {
namespace {

// The router settings that choose and weigh each token's experts: part of the model's function, as
// norm_eps and rope_theta are (transformers' config.json holds them), so a resume
// that changed one would train on another model without a word. Its training settings (capacity,
// the auxiliary losses' coefficients, the bias update's rate) may change between runs.
std::vector<std::string> router_differences(const nlohmann::json& manifest, const Config& config) {
  const auto asked = moe_router_record(config);
  if (!manifest.contains("moe_router") || !manifest.at("moe_router").is_object() || asked.is_null()) return {};
  const auto& saved = manifest.at("moe_router");
  std::vector<std::string> differences;
  for (const char* key : {"top_k", "score", "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group"}) {
    if (saved.contains(key) && saved.at(key) != asked.at(key)) {
      differences.push_back(std::string("model.moe.") + key + " = " + saved.at(key).dump() + ", the config " +
                            asked.at(key).dump());
    }
  }
  return differences;
}

}  // namespace

std::string resume_refusal(const nlohmann::json& manifest, const Config& config, const nlohmann::json& data_now,
                           bool allow_data_change) {
  std::string joined;
  auto differences = model_record_differences(complete_model_record(manifest.at("model")),
                                              complete_model_record(model_record(config)));
  for (auto& d : router_differences(manifest, config)) differences.push_back(std::move(d));
  for (const auto& d : differences) joined += (joined.empty() ? "" : "; ") + d;
  if (!joined.empty()) return "the checkpoint has " + joined;

  // The moments mean what their optimizer made them: AdamW's exp_avg is not Muon's momentum.
  const std::string saved_optimizer = manifest.value("optimizer", std::string("adamw"));
  if (saved_optimizer != to_string(config.train.optimizer)) {
    return "the checkpoint was trained with train.optimizer = " + saved_optimizer + ", the config has " +
           to_string(config.train.optimizer) + "; its optimizer state would be read as the other's";
  }
  if (config.train.optimizer == OptimizerKind::muon) {
    // Which weights Muon trains decides what each saved moment means.
    const auto groups = manifest.value("muon_groups", nlohmann::json::object());
    for (const auto& [key, now] :
         {std::pair{"include", config.train.muon.include}, std::pair{"exclude", config.train.muon.exclude}}) {
      const auto saved = groups.value(key, std::string());
      if (saved != now) {
        return std::string("the checkpoint was trained with train.muon.") + key + " = '" + saved +
               "', the config has '" + now + "'; its optimizer state would be read as the other group's";
      }
    }
  }

  // A requeued job given the same exit_after would resume, train nothing and save again, for ever;
  // one below the checkpoint would be passed by silently and train on to train.steps.
  const auto step = manifest.value("step", int64_t{0});
  if (config.train.exit_after >= 0 && config.train.exit_after <= step) {
    return fmt::format(
        "train.exit_after = {} is not past the checkpoint's step {}: the run would stop before training a step "
        "(give a later step, or -1 to train to train.steps)",
        config.train.exit_after, step);
  }

  const std::string changed = data_change(manifest, data_now);
  if (!changed.empty() && !allow_data_change) {
    return fmt::format(
        "the data would not continue the checkpoint's order ({}): going on after its {} consumed samples, some "
        "samples would be trained twice and others never. Resume with the data it was trained on, or pass "
        "--allow-data-change to go on at that count in the new order (a new mixture, say)",
        changed, manifest.value("consumed_samples", int64_t{0}));
  }
  return "";
}

}  // namespace loom::launch
