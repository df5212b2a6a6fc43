// The state a checkpoint carries beside the tensors: where the run is (its step and samples), fp16's
// loss scale, the MoE expert biases and the losses since the last log line. Written into the
// manifest by rank 0, read back from it by every rank.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom::launch {

struct TrainingState {
  int64_t step = 0;
  int64_t consumed_samples = 0;
  // fp16's dynamic loss scale: its value (0: not fp16), clean steps since it last changed, skipped steps.
  double loss_scale = 0.0;
  int64_t loss_scale_clean_steps = 0;
  int64_t skipped_steps = 0;
  std::vector<std::vector<double>> expert_bias;  // MoE layers' expert biases (launch/moe_metrics.h); empty: none
  // The finite losses since the last log line (its avg_loss's): a resume between log lines goes on
  // with them, where it would average only the steps after it.
  std::vector<double> interval_losses;
};

// STATE's fields into the manifest HEADER (step, consumed_samples, expert_bias, interval_losses,
// loss_scaler; train_steps is the config's, written by the checkpointer).
void write_training_state(const TrainingState& state, nlohmann::json& header);

// The state MANIFEST holds; a field of the wrong form is refused naming SOURCE (exit 2).
TrainingState read_training_state(const nlohmann::json& manifest, const std::string& source);

}  // namespace loom::launch
