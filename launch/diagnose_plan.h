// `loom diagnose RUN_DIR --cluster FILE`: the run's measured step split beside what `loom plan`'s
// cost model (launch/layout_cost.h) predicts for the same layout on that cluster, part by part,
// and the part that deviates most. The parts are the diagnosis's: compute and the optimizer, each
// group's exposed communication, pipeline idle (the bubble and the stage-to-stage transfers,
// which is where a pipeline rank waits), data.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

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

// The cluster a run is compared with (log.cluster, or loom diagnose's --cluster: WHO names it in
// errors), read before the run starts so that a wrong file fails before step 1 rather than after
// the last; nullopt when PATH is empty. InputError (exit 2) for a file load_cluster refuses. (A
// mixture of experts is compared too: its all-to-all predicted for even routing, expert_plan.h.)
std::optional<parallel::ClusterSpec> cluster_to_compare(const Config& config, const std::string& path,
                                                        const std::string& who);

// DIAGNOSIS gains "plan" (plan_beside_measured), given the run's traffic report (traffic.json's
// content; null: left out) "collectives" (collectives_beside_cluster), and given PROBE (the run's
// parallel/alpha_beta_probe.h result; null: left out) "links" (links_beside_cluster), whose group's
// figures a communication-bound verdict then quotes. format_diagnosis prints them all.
void add_plan_comparison(nlohmann::json& diagnosis, const Config& config, const parallel::ClusterSpec& cluster,
                         const nlohmann::json& traffic, const nlohmann::json& probe = nullptr);

// PROBE's rows, each with the link the layout puts its group on ("link") and that link's latency
// and bandwidth in the cluster file ("cluster_alpha_us", "cluster_bandwidth_GBps").
nlohmann::json links_beside_cluster(const Config& config, const parallel::ClusterSpec& cluster,
                                    const nlohmann::json& probe);

// Its lines.
std::string format_links_beside_cluster(const nlohmann::json& rows);

}  // namespace loom::launch
