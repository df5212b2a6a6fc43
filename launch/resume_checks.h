// Whether a checkpoint's state can continue this run: the same model (launch/model_record.h), the
// same optimizer and Muon groups (the saved moments mean what they made them), and the same data
// in the same order (launch/data_record.h). Checked by rank 0 before it touches checkpoint.dir
// (a refused resume sets nothing aside), and by every rank once the choice is broadcast.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/config.h"

namespace loom::launch {

// Why the checkpoint of MANIFEST cannot continue a run of CONFIG over the data DATA_NOW (its
// data_record); empty when it can. Other data is a reason only without ALLOW_DATA_CHANGE.
std::string resume_refusal(const nlohmann::json& manifest, const Config& config, const nlohmann::json& data_now,
                           bool allow_data_change);

}  // namespace loom::launch
