#include "parallel/traffic_report.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "parallel/node_map.h"

namespace loom::parallel {
namespace {

// The fixed layout of one rank's row in the gather: every (group, op) in this
// order, six numbers each, then bytes sent to each rank.
const std::vector<std::string> kGroups = [] {
  std::vector<std::string> names{"world"};
  for (GroupKind kind : kAllGroupKinds) names.push_back(group_kind_name(kind));
  return names;
}();
const std::vector<std::string> kOps = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                       "broadcast",  "send_recv",  "barrier"};
constexpr int64_t kFields = 6;  // calls, bytes, sent, seconds, sent intra-node, sent inter-node

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char buffer[160];
  std::snprintf(buffer, sizeof(buffer), fmt, a, b, c);
  return buffer;
}

}  // namespace

nlohmann::json alpha_beta_report(const std::map<std::string, AlphaBetaFit>& fits) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [op, fit] : fits) {
    // A line through (bytes, seconds) is a latency and a bandwidth only with alpha >= 0 and
    // beta > 0; anything else is noise over sizes that do not tell them apart, so no figures.
    std::string no_fit;
    if (fit.samples < 2) {
      no_fit = "fewer than 2 calls";
    } else if (fit.beta_s_per_byte <= 0) {
      no_fit = "the time did not grow with the size (sizes too alike, or noise)";
    } else if (fit.alpha_s < 0) {
      no_fit = "the line through the times has a negative latency (the sizes measured do not reach small messages)";
    }
    if (!no_fit.empty()) {
      out[op] = {{"samples", fit.samples}, {"no_fit", no_fit}};
      continue;
    }
    out[op] = {{"samples", fit.samples},
               {"alpha_us", fit.alpha_s * 1e6},
               {"beta_s_per_byte", fit.beta_s_per_byte},
               {"bandwidth_GBps", 1e-9 / fit.beta_s_per_byte}};
  }
  return out;
}

nlohmann::json gather_traffic_report(ProcessGroups& groups, const CommStats& stats, int64_t steps,
                                     const std::string& host, int64_t local_world, int64_t ranks_per_node) {
  const auto counters = stats.counters();
  const auto sent_to = stats.sent_to();
  const auto by_op = stats.sent_to_by_op();
  const auto fits = stats.fits();
  const int64_t world = groups.world();
  const auto node_of_rank = discover_nodes(groups.world_comm(), host, local_world, ranks_per_node);
  const int64_t me = node_of_rank[static_cast<size_t>(groups.rank())];
  const int64_t counter_fields = static_cast<int64_t>(kGroups.size() * kOps.size()) * kFields;
  const int64_t row = counter_fields + world;

  auto mine = torch::zeros({row}, torch::kFloat64);
  auto m = mine.accessor<double, 1>();
  int64_t i = 0;
  for (const auto& g : kGroups) {
    for (const auto& op : kOps) {
      auto it = counters.find({g, op});
      if (it != counters.end()) {
        m[i] = static_cast<double>(it->second.calls);
        m[i + 1] = static_cast<double>(it->second.bytes);
        m[i + 2] = static_cast<double>(it->second.sent);
        m[i + 3] = it->second.seconds;
      }
      auto peers = by_op.find({g, op});
      if (peers != by_op.end()) {
        for (const auto& [peer, bytes] : peers->second)
          m[i + (node_of_rank[static_cast<size_t>(peer)] == me ? 4 : 5)] += static_cast<double>(bytes);
      }
      i += kFields;
    }
  }
  for (const auto& [peer, bytes] : sent_to) m[counter_fields + peer] = static_cast<double>(bytes);

  auto all = torch::empty({world, row}, torch::kFloat64);
  groups.world_comm().all_gather(all, mine).wait();
  if (groups.rank() != 0) return nullptr;

  auto a = all.accessor<double, 2>();
  nlohmann::json report;
  report["steps"] = steps;
  report["world"] = world;
  report["counter_note"] =
      "bytes: payload as the rank sees it; sent: what the rank transmits under the ring model (exact for "
      "all_to_all and send_recv); seconds: from issue to completion, waiting for peers included";
  report["nodes"] = node_members(node_of_rank);
  for (int64_t r = 0; r < world; ++r) {
    nlohmann::json rank_groups = nlohmann::json::object();
    int64_t j = 0;
    for (const auto& g : kGroups) {
      for (const auto& op : kOps) {
        if (a[r][j] > 0) {
          rank_groups[g][op] = {{"calls", static_cast<int64_t>(a[r][j])},
                                {"bytes", static_cast<int64_t>(a[r][j + 1])},
                                {"sent", static_cast<int64_t>(a[r][j + 2])},
                                {"sent_intra_node", static_cast<int64_t>(a[r][j + 4])},
                                {"sent_inter_node", static_cast<int64_t>(a[r][j + 5])},
                                {"seconds", a[r][j + 3]}};
        }
        j += kFields;
      }
    }
    report["ranks"].push_back({{"rank", r}, {"node", node_of_rank[static_cast<size_t>(r)]}, {"groups", rank_groups}});
    std::vector<int64_t> matrix_row;
    for (int64_t peer = 0; peer < world; ++peer)
      matrix_row.push_back(static_cast<int64_t>(a[r][counter_fields + peer]));
    report["matrix_sent_bytes"].push_back(matrix_row);
  }
  if (!fits.empty()) report["alpha_beta_rank0"] = alpha_beta_report(fits);
  return report;
}

std::vector<std::string> traffic_diagnostics(const nlohmann::json& report, const RankGrid& grid) {
  std::vector<std::string> out;
  const auto& ranks = report.at("ranks");
  // What kind of traffic dominates.
  double total = 0, all_to_all = 0;
  for (const auto& r : ranks) {
    for (const auto& [group, ops] : r.at("groups").items()) {
      for (const auto& [op, c] : ops.items()) {
        total += c.at("sent").get<double>();
        if (op == "all_to_all") all_to_all += c.at("sent").get<double>();
      }
    }
  }
  if (total > 0 && all_to_all > 0.5 * total) {
    out.push_back(
        format("all-to-all carries %.0f%% of the bytes sent: an MoE job, whose expert dispatch is what "
               "the fabric carries",
               100.0 * all_to_all / total));
  }
  // A rank that receives far more than the others.
  const auto& matrix = report.at("matrix_sent_bytes");
  std::vector<double> received(matrix.size(), 0.0);
  for (const auto& row : matrix) {
    for (size_t peer = 0; peer < row.size(); ++peer) received[peer] += row[peer].get<double>();
  }
  if (received.size() > 2) {
    auto sorted = received;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    for (size_t r = 0; r < received.size(); ++r) {
      if (median > 0 && received[r] > 3.0 * median) {
        out.push_back(
            format("rank %.0f receives %.1fx the median rank's bytes: a hot spot (in an MoE job, a hot "
                   "expert)",
                   static_cast<double>(r), received[r] / median));
      }
    }
  }
  // Tensor-parallel groups should stay within a node.
  for (const auto& group : grid.groups(GroupKind::tp)) {
    std::vector<int64_t> nodes;
    for (int64_t r : group) nodes.push_back(ranks.at(static_cast<size_t>(r)).at("node").get<int64_t>());
    std::sort(nodes.begin(), nodes.end());
    const auto distinct = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
    if (distinct > 1) {
      out.push_back(
          format("a tp group starting at rank %.0f spans %.0f nodes: its per-layer all-reduces cross the "
                 "inter-node link; keep tp within a node",
                 static_cast<double>(group.front()), static_cast<double>(distinct)));
    }
  }
  return out;
}

std::string format_traffic_table(const nlohmann::json& report) {
  const double steps = std::max<double>(1.0, report.at("steps").get<double>());
  std::string out = "traffic per step, rank 0 (every rank and the matrix in traffic.json):\n";
  out += "  group           op              calls/step     MB/step   ms/step  sent inter-node\n";
  for (const auto& [group, ops] : report.at("ranks").at(0).at("groups").items()) {
    for (const auto& [op, c] : ops.items()) {
      // The share of the bytes sent that left the node (parallel/node_map.h).
      const double sent = c.at("sent").get<double>(), inter = c.value("sent_inter_node", 0.0);
      const std::string share = sent > 0 ? format("%.0f%%", 100.0 * inter / sent) : "-";
      char line[192];
      std::snprintf(line, sizeof(line), "  %-15s %-15s %10.1f %11.3f %9.2f  %15s\n", group.c_str(), op.c_str(),
                    c.at("calls").get<double>() / steps, c.at("bytes").get<double>() / steps / 1e6,
                    c.at("seconds").get<double>() / steps * 1e3, share.c_str());
      out += line;
    }
  }
  if (report.contains("alpha_beta_rank0")) {
    out += "  measured alpha-beta (rank 0):";
    for (const auto& [op, fit] : report.at("alpha_beta_rank0").items()) {
      // A pipeline receive is posted ahead of need, so its time is mostly waiting: no fit.
      if (op == "send_recv") continue;
      if (fit.contains("no_fit")) {
        out += " " + op + ": no fit, " + fit.at("no_fit").get<std::string>() + ";";
        continue;
      }
      out += " " + op +
             format(" alpha %.0f us, %.2f GB/s;", fit.at("alpha_us").get<double>(),
                    fit.at("bandwidth_GBps").get<double>());
    }
    out += "\n";
  }
  if (report.contains("diagnostics")) {
    for (const auto& d : report.at("diagnostics")) out += "  note: " + d.get<std::string>() + "\n";
  }
  return out;
}

}  // namespace loom::parallel
