// Keys a config sets that the rest of it turns off: train.muon.* under AdamW, the loss-scale keys
// outside fp16, parallel.powersgd.* without PowerSGD, ... They are accepted (a config may keep
// them for a switch made with --set), but a user who set one surely meant it to act: each is named
// once, with the key that decides.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace loom {

// One line per such key the YAML file or an override set to another value than its default
// ("train.muon.lr is set, but ...").
std::vector<std::string> inert_key_warnings(const Config& config);

// Whether the rest of CONFIG turns KEY off (whatever its value): a change of it changes nothing.
bool has_no_effect(const Config& config, const std::string& key);

}  // namespace loom
