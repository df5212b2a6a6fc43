// A Hugging Face config.json's rotary embedding as loom's model keys (model.rope_theta,
// model.rope_scaling.*), read as transformers 5 reads it: the rope_parameters form or the older
// rope_theta and rope_scaling, the rope types loom implements, and the defaults transformers
// fills in.
#pragma once

#include <nlohmann/json.hpp>

#include "core/hf_json.h"

namespace loom {

// Appends the rotary keys of config.json JSON (read through HF) to KEYS; DEFAULT_THETA is the
// transformers class's own default, for a file that names none. Refuses (InputError) a rope type
// loom does not implement and a file whose forms contradict each other.
void add_rope(const HfJson& hf, const nlohmann::json& json, HfKeys& keys, double default_theta);

}  // namespace loom
