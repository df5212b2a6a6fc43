// The training settings a checkpoint records (beside its learning-rate schedule, optim/lr_schedule.h):
// those that change the numbers of the steps to come but not what the checkpoint holds, so that a
// resume may change them (a larger batch, bf16 for fp32, another gradient clip), but never without
// a word: an edited YAML file or a stray --set is said at the resume, with the values before and after.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/config.h"

namespace loom::launch {

// {"train.precision": "bf16", ...}: each recorded key as `loom train --help` prints its value.
nlohmann::json training_settings_record(const Config& config);

// "train.precision bf16 -> fp32, train.global_batch_size 32 -> 64" for each recorded key CONFIG
// sets otherwise than SAVED; "" when none differs or SAVED is no record (a checkpoint before it).
// Muon's keys count only when CONFIG trains with Muon.
std::string training_settings_change(const Config& config, const nlohmann::json& saved);

}  // namespace loom::launch
