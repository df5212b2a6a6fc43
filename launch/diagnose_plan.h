// `loom diagnose RUN_DIR --cluster FILE`: the run's measured step split beside what `loom plan`'s
// cost model (launch/layout_cost.h) predicts for the same layout on that cluster, part by part,
// and the part that deviates most. The parts are the diagnosis's: compute and the optimizer, each
// group's exposed communication, pipeline idle (the bubble and the stage-to-stage transfers,
// which is where a pipeline rank waits), data.
#pragma once

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "parallel/cluster_spec.h"

namespace loom::launch {

// {"cluster": name, "parts": [{"part", "measured_ms", "predicted_ms"}...], "step": {...},
//  "largest_deviation": {"part", "measured_ms", "predicted_ms"}} for CONFIG's layout.
nlohmann::json plan_beside_measured(const Config& config, const parallel::ClusterSpec& cluster,
                                    const nlohmann::json& diagnosis);

// Its lines: the table, then the largest deviation.
std::string format_plan_beside_measured(const nlohmann::json& comparison);

}  // namespace loom::launch
