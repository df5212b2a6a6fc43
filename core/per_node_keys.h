// The config keys a node may set for itself: its cores, its GPU's peak, its device, its memory
// check. The ranks of one job need not agree on them (launch/config_agreement.h), and a requeue
// onto other nodes may change them (launch/resume_choice.h's line).
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace loom {

const std::vector<std::string>& per_node_keys();

// CONFIG with every per_node_keys() key at its default.
Config without_per_node_keys(Config config);

}  // namespace loom
