// The "model" record of a checkpoint's manifest: the model keys it was saved
// with. Resuming refuses a checkpoint whose record differs from the config's;
// `loom export` builds the model's description from it. Keys at GPT-2's
// defaults are left out, so a GPT-2 checkpoint's record is what it was before
// loom knew other architectures, and old checkpoints resume.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"

namespace loom::launch {

nlohmann::json model_record(const Config& config);

// RECORD with the keys left out filled in with GPT-2's defaults, for comparing.
nlohmann::json complete_model_record(const nlohmann::json& record);

// Every key where the complete records SAVED and ASKED differ, as "model.KEY = SAVED, the
// config ASKED": the architecture and the sizes first (a different hidden_size is named as such,
// before the ffn_hidden_size derived from it), then the rest; keys by the config's names
// (model.moe.num_experts). Empty when they agree.
std::vector<std::string> model_record_differences(const nlohmann::json& saved, const nlohmann::json& asked);

// The MoE router's settings (top_k, score, renormalisation, scaling, groups, capacity, the
// auxiliary losses' coefficients), saved beside the record as the manifest's "moe_router" for
// `loom export`, which writes them into config.json. A resume compares the ones that choose and
// weigh experts (launch/resume_checks.cpp); the training settings may change. Null for a dense model.
nlohmann::json moe_router_record(const Config& config);
// Sets CONFIG's router keys from ROUTER (moe_router_record's form); throws InputError naming SOURCE.
void apply_moe_router_record(Config& config, const nlohmann::json& router, const std::string& source);

// A Config whose model is RECORD's (the other sections at their defaults). Throws
// InputError naming SOURCE when the record cannot be read.
Config config_of_model_record(const nlohmann::json& record, const std::string& source);

}  // namespace loom::launch
