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

// Each (group, op) the run's ranks counted (TRAFFIC: the run's traffic.json), per call averaged over
// the ranks, beside the cluster's alpha-beta for that collective on the link the layout puts the
// group on (ranks laid out on nodes of the cluster's gpus_per_node, as loom plan lays them):
// [{"group", "op", "ranks", "link", "calls_per_step", "bytes_per_call", "measured_ms_per_call",
//   "predicted_ms_per_call"}...], the largest measured time first.
nlohmann::json collectives_beside_cluster(const Config& config, const parallel::ClusterSpec& cluster,
                                          const nlohmann::json& traffic);

// Its lines.
std::string format_collectives_beside_cluster(const nlohmann::json& rows);

}  // namespace loom::launch
