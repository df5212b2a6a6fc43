// The traffic report of a run: every rank's communication counters gathered
// to rank 0, a rank-by-rank matrix of who sent how many bytes to whom, the
// alpha-beta fit of the backend measured on this run's calls, and plain-words
// diagnostics (an all-to-all-dominated job is an MoE job; a rank receiving
// several times the median is a hot spot; a tp group across nodes).
// Written as RUN_DIR/traffic.json and printed as a short table.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/comm_stats.h"
#include "parallel/process_groups.h"

namespace loom::parallel {

// Collective over GROUPS' world (call it on every rank). STATS is snapshotted
// first, so the gather itself is not in the report. Returns the report on
// rank 0 and null elsewhere. HOST names this rank's machine, LOCAL_WORLD is the launcher's
// local world size, RANKS_PER_NODE parallel.ranks_per_node: the nodes they make
// (parallel/node_map.h) give each rank's "node", the report's "nodes" (each node's ranks),
// and each counter's sent bytes split into sent_intra_node and sent_inter_node.
nlohmann::json gather_traffic_report(ProcessGroups& groups, const CommStats& stats, int64_t steps,
                                     const std::string& host, int64_t local_world, int64_t ranks_per_node);

// The fit of each op's (bytes, seconds) line as {"samples", "alpha_us", "beta_s_per_byte",
// "bandwidth_GBps"}, or {"samples", "no_fit": why} where the line is not a latency and a
// bandwidth (fewer than 2 calls, beta <= 0, alpha < 0).
nlohmann::json alpha_beta_report(const std::map<std::string, AlphaBetaFit>& fits);

// What the report says in plain words, from its counters, matrix and the grid.
std::vector<std::string> traffic_diagnostics(const nlohmann::json& report, const RankGrid& grid);

// Rank 0's traffic per step by group and op, the fit and the diagnostics, for the end of a run.
std::string format_traffic_table(const nlohmann::json& report);

}  // namespace loom::parallel
