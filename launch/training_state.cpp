#include "launch/training_state.h"

#include "core/errors.h"

namespace loom::launch {

void write_training_state(const TrainingState& state, nlohmann::json& header) {
  header["step"] = state.step;
  header["consumed_samples"] = state.consumed_samples;
  if (!state.expert_bias.empty()) header["expert_bias"] = state.expert_bias;
  if (!state.interval_losses.empty()) header["interval_losses"] = state.interval_losses;
  if (state.loss_scale > 0) {
    header["loss_scaler"] = {{"scale", state.loss_scale},
                             {"clean_steps", state.loss_scale_clean_steps},
                             {"skipped_steps", state.skipped_steps}};
  }
}

TrainingState read_training_state(const nlohmann::json& manifest, const std::string& source) {
  TrainingState state{manifest.at("step").get<int64_t>(), manifest.at("consumed_samples").get<int64_t>()};
  if (manifest.contains("expert_bias")) {
    try {
      state.expert_bias = manifest.at("expert_bias").get<std::vector<std::vector<double>>>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(source + ": manifest.json's expert_bias is not a list of lists of numbers: " + e.what());
    }
  }
  if (manifest.contains("interval_losses")) {
    try {
      state.interval_losses = manifest.at("interval_losses").get<std::vector<double>>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(source + ": manifest.json's interval_losses is not a list of numbers: " + e.what());
    }
  }
  if (manifest.contains("loss_scaler")) {
    try {
      const auto& scaler = manifest.at("loss_scaler");
      state.loss_scale = scaler.at("scale").get<double>();
      state.loss_scale_clean_steps = scaler.at("clean_steps").get<int64_t>();
      state.skipped_steps = scaler.at("skipped_steps").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(source + ": manifest.json's loss_scaler is incomplete: " + e.what());
    }
  }
  return state;
}

}  // namespace loom::launch
