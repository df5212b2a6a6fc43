// Which parameters Muon trains (train.optimizer: muon), by name: by default every 2-D weight
// inside the transformer blocks ("h.N. ..."), MoE routers excepted; train.muon.include adds the
// matrices whose names match its patterns, train.muon.exclude gives the matching ones back to
// AdamW (exclude wins). Patterns are comma-separated; '*' matches any run of characters, dots
// included ("h.*.attn.proj.weight", "lm_head"). The trainer and the cost model both ask here.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace loom {

// PATTERN (with '*') matches the whole of NAME.
bool name_matches(const std::string& pattern, const std::string& name);
// The patterns of a comma-separated list, spaces trimmed, empty ones dropped.
std::vector<std::string> name_patterns(const std::string& list);

// Whether Muon trains the parameter NAME of DIMS dimensions. Throws InputError (naming
// train.muon.include) when an include pattern matches a parameter that is not a matrix.
bool muon_trains(const MuonConfig& muon, const std::string& name, int64_t dims);

}  // namespace loom
