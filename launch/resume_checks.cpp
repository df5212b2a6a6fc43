#include "launch/resume_checks.h"

#include <fmt/format.h>

#include "launch/data_record.h"
#include "launch/model_record.h"

namespace loom::launch {

std::string resume_refusal(const nlohmann::json& manifest, const Config& config, const nlohmann::json& data_now,
                           bool allow_data_change) {
  std::string joined;
  for (const auto& d : model_record_differences(complete_model_record(manifest.at("model")),
                                                complete_model_record(model_record(config))))
    joined += (joined.empty() ? "" : "; ") + d;
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
