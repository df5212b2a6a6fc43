#include "launch/diagnose_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "launch/expert_plan.h"
#include "launch/layout_cost.h"
#include "parallel/rank_grid.h"

namespace loom::launch {

namespace {
std::map<std::string, std::pair<int64_t, bool>> group_links(const Config& config, const parallel::ClusterSpec& cluster);
}  // namespace

nlohmann::json plan_beside_measured(const Config& config, const parallel::ClusterSpec& cluster,
                                    const nlohmann::json& d) {
  const auto& p = config.parallel;
  const auto e = estimate_layout(config, cluster, layout_of(config));

  // The prediction in the diagnosis's parts (ms per step). The model puts tp, cp and pp transfers on
  // the critical path, hides two thirds of compute's worth of the dp reduction behind backward, and
  // stretches the critical path by 1 / (1 - bubble).
  std::map<std::string, double> predicted{{"compute and optimizer", e.compute_s * 1e3}};
  double critical = e.compute_s, dp_seconds = 0, pp_seconds = 0;
  for (const auto& t : e.traffic) {
    if (is_gradient_group(t.group)) {  // dp, dp-cp, HSDP's dp-shard and dp-replicate, expert-dp
      dp_seconds += t.seconds;
    } else if (t.group == "pp") {
      pp_seconds = t.seconds;
      critical += t.seconds;
    } else {
      predicted["communication " + t.group] = t.seconds * 1e3;
      critical += t.seconds;
    }
  }
  // A mixture of experts' all-to-all at ep > 1 (launch/expert_plan.h, even routing: the router's
  // real choices can only send more to the busiest rank), on the critical path: each call one
  // latency per peer, the bytes at the ep group's link.
  double ep_seconds = 0;
  if (config.model.moe.enabled() && p.ep > 1) {
    const auto ex = expert_plan(config, p.tp * p.cp * p.pp * p.dp, p.ep);
    const bool intra = group_links(config, cluster).at("ep").second;
    const double alpha = intra ? cluster.intra_latency : cluster.inter_latency;
    const double beta = 1.0 / (intra ? cluster.intra_bandwidth : cluster.inter_bandwidth);
    ep_seconds = ex.all_to_all_bytes * beta + ex.all_to_all_calls * static_cast<double>(p.ep - 1) * alpha;
    predicted["communication ep"] = ep_seconds * 1e3;
    critical += ep_seconds;
  }
  const double bubble_s = e.bubble < 1.0 ? critical / (1.0 - e.bubble) - critical : 0.0;
  if (p.pp > 1) predicted["pipeline idle"] = (bubble_s + pp_seconds) * 1e3;
  const double dp_exposed = dp_seconds > 0 ? exposed_dp_seconds(dp_seconds, e.dp_unhidden_s, e.compute_s) : 0.0;
  if (dp_seconds > 0) {
    // Under ZeRO-3 the diagnosis counts dp's all-gathers apart ("ZeRO-3 gathers") from its
    // reduce-scatter: the exposed time is split as their bytes are. layout_cost.cpp's model sends
    // three parameter gathers and one gradient reduce-scatter of the same element size: 3/4 gathers.
    const double gathers = p.zero_stage == 3 ? 0.75 : 0.0;
    if (p.zero_stage == 3) predicted["ZeRO-3 gathers"] = gathers * dp_exposed * 1e3;
    predicted["communication dp"] = (1.0 - gathers) * dp_exposed * 1e3;
  }

  // The measurement, in the same parts.
  const double step_ms = d.at("mean_step_ms").get<double>();
  std::map<std::string, double> measured{{"compute and optimizer", d.at("compute_share").get<double>() * step_ms}};
  for (const auto& [part, share] : d.at("shares").items()) measured[part] += share.get<double>() * step_ms;

  nlohmann::json parts = nlohmann::json::array();
  std::map<std::string, bool> seen;
  nlohmann::json largest;
  double worst = -1;
  auto add = [&](const std::string& part) {
    if (seen[part]) return;
    seen[part] = true;
    const double m = measured.count(part) ? measured[part] : 0.0, q = predicted.count(part) ? predicted[part] : 0.0;
    nlohmann::json row = {{"part", part}, {"measured_ms", m}, {"predicted_ms", q}};
    parts.push_back(row);
    if (std::abs(m - q) > worst) worst = std::abs(m - q), largest = row;
  };
  for (const auto& [part, ms] : predicted) add(part);
  for (const auto& [part, ms] : measured) add(part);
  return {{"cluster", cluster.name},
          {"parts", parts},
          {"step",
           {{"measured_ms", step_ms},
            {"predicted_ms", (e.step_s + (e.bubble < 1.0 ? ep_seconds / (1.0 - e.bubble) : ep_seconds)) * 1e3}}},
          {"largest_deviation", largest}};
}

std::string format_plan_beside_measured(const nlohmann::json& c) {
  std::ostringstream out;
  char line[256];
  out << "beside loom plan's prediction for this layout on " << c.at("cluster").get<std::string>() << ":\n";
  out << "  part                      measured ms  predicted ms\n";
  auto row = [&](const std::string& part, const nlohmann::json& r) {
    std::snprintf(line, sizeof(line), "  %-24s  %11.1f  %12.1f\n", part.c_str(), r.at("measured_ms").get<double>(),
                  r.at("predicted_ms").get<double>());
    out << line;
  };
  for (const auto& r : c.at("parts")) row(r.at("part").get<std::string>(), r);
  row("step", c.at("step"));
  const auto& worst = c.at("largest_deviation");
  if (!worst.is_null()) {
    const double m = worst.at("measured_ms").get<double>(), q = worst.at("predicted_ms").get<double>();
    std::snprintf(line, sizeof(line), "  largest deviation: %s, measured %.1f ms against %.1f ms predicted",
                  worst.at("part").get<std::string>().c_str(), m, q);
    out << line;
    if (q > 0) {
      std::snprintf(line, sizeof(line), " (%.2gx)", m / q);
      out << line;
    }
    out << "\n";
  }
  return out.str();
}

namespace {

// "2, 3" for [2, 3]; the first three and a count past that.
std::string ranks_text(const nlohmann::json& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size() && i < 3; ++i) text += (i ? ", " : "") + std::to_string(ranks[i].get<int64_t>());
  if (ranks.size() > 3) text += ", ... (" + std::to_string(ranks.size()) + ")";
  return text;
}

// Each group kind's size, and whether its first group stays inside one node of the cluster (ranks
// laid on nodes of the cluster's gpus_per_node, as loom plan lays them).
std::map<std::string, std::pair<int64_t, bool>> group_links(const Config& config,
                                                            const parallel::ClusterSpec& cluster) {
  const auto& p = config.parallel;
  const parallel::RankGrid grid({p.tp, p.pp, p.dp, p.ep, p.cp, p.dp_shard}, p.order);
  grid.require_even_hsdp();  // an uneven HSDP cut of an expert-dp group: exit 2 naming parallel.dp_shard
  std::map<std::string, std::pair<int64_t, bool>> groups;
  for (auto kind : parallel::kAllGroupKinds) {
    const auto all = grid.groups(kind);
    if (all.empty()) continue;
    const auto& first = all.front();
    const auto [low, high] = std::minmax_element(first.begin(), first.end());
    groups[parallel::group_kind_name(kind)] = {static_cast<int64_t>(first.size()),
                                               *low / cluster.gpus_per_node == *high / cluster.gpus_per_node};
  }
  groups["world"] = {grid.world(), grid.world() <= cluster.gpus_per_node};
  return groups;
}

}  // namespace

nlohmann::json collectives_beside_cluster(const Config& config, const parallel::ClusterSpec& cluster,
                                          const nlohmann::json& traffic) {
  const auto groups = group_links(config, cluster);

  // Every rank's calls, bytes and seconds of each (group, op), summed over the ranks.
  std::map<std::pair<std::string, std::string>, std::array<double, 3>> sums;
  for (const auto& rank : traffic.at("ranks")) {
    for (const auto& [group, ops] : rank.at("groups").items()) {
      for (const auto& [op, c] : ops.items()) {
        auto& s = sums[{group, op}];
        s[0] += c.at("calls").get<double>();
        s[1] += c.at("bytes").get<double>();
        s[2] += c.at("seconds").get<double>();
      }
    }
  }
  const double steps = std::max<double>(1.0, traffic.at("steps").get<double>());
  const double world = static_cast<double>(traffic.at("ranks").size());
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, s] : sums) {
    const auto& [group, op] = key;
    const auto found = groups.find(group);
    if (s[0] <= 0 || found == groups.end() || op == "barrier") continue;
    const int64_t ranks = found->second.first;
    const bool intra = found->second.second;
    const double alpha = intra ? cluster.intra_latency : cluster.inter_latency;
    const double beta = 1.0 / (intra ? cluster.intra_bandwidth : cluster.inter_bandwidth);
    const double n = s[1] / s[0];  // payload bytes per call, as the counters define it (parallel/comm_stats.h)
    double predicted = 0;
    if (op == "all_reduce") {
      predicted = ring_all_reduce_time(n, ranks, alpha, beta);
    } else if (op == "all_gather" || op == "reduce_scatter") {
      predicted = ring_all_gather_time(n, ranks, alpha, beta);
    } else if (op == "all_to_all") {
      predicted = all_to_all_time(n, ranks, alpha, beta);
    } else {  // send_recv (bytes sent plus received) and broadcast: one message each way
      predicted = point_to_point_time(op == "send_recv" ? n / 2.0 : n, alpha, beta);
    }
    rows.push_back({{"group", group},
                    {"op", op},
                    {"ranks", ranks},
                    {"link", intra ? "intra-node" : "inter-node"},
                    {"calls_per_step", s[0] / world / steps},
                    {"bytes_per_call", n},
                    {"measured_ms_per_call", s[2] / s[0] * 1e3},
                    {"predicted_ms_per_call", predicted * 1e3}});
  }
  std::sort(rows.begin(), rows.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.at("measured_ms_per_call").get<double>() * a.at("calls_per_step").get<double>() >
           b.at("measured_ms_per_call").get<double>() * b.at("calls_per_step").get<double>();
  });
  return rows;
}

std::string format_collectives_beside_cluster(const nlohmann::json& rows) {
  if (rows.empty()) return "";  // one rank: no collective was counted
  std::ostringstream out;
  char line[256];
  out << "each collective per call (the mean over the ranks) beside the cluster's alpha-beta on its link:\n";
  out << "  group           op              ranks  link        calls/step  KiB/call  measured ms  alpha-beta ms\n";
  for (const auto& r : rows) {
    std::snprintf(line, sizeof(line), "  %-14s  %-14s  %5lld  %-10s  %10.1f  %8.1f  %11.3f  %13.4f\n",
                  r.at("group").get<std::string>().c_str(), r.at("op").get<std::string>().c_str(),
                  static_cast<long long>(r.at("ranks").get<int64_t>()), r.at("link").get<std::string>().c_str(),
                  r.at("calls_per_step").get<double>(), r.at("bytes_per_call").get<double>() / 1024.0,
                  r.at("measured_ms_per_call").get<double>(), r.at("predicted_ms_per_call").get<double>());
    out << line;
  }
  return out.str();
}

std::optional<parallel::ClusterSpec> cluster_to_compare(const Config& config, const std::string& path,
                                                        const std::string& who) {
  if (path.empty()) return std::nullopt;
  try {
    return parallel::load_cluster(path);
  } catch (const InputError& e) {
    throw InputError(who + ": " + e.what());
  }
}

void add_plan_comparison(nlohmann::json& diagnosis, const Config& config, const parallel::ClusterSpec& cluster,
                         const nlohmann::json& traffic, const nlohmann::json& probe) {
  diagnosis["plan"] = plan_beside_measured(config, cluster, diagnosis);
  if (!traffic.is_null()) diagnosis["collectives"] = collectives_beside_cluster(config, cluster, traffic);
  // Without a probe (loom diagnose --cluster, afterwards) the run's own measured links, if it kept
  // any, are set beside this cluster instead of the one the run named.
  const nlohmann::json measured = !probe.is_null() ? probe : diagnosis.value("links", nlohmann::json());
  if (measured.is_null() || measured.empty()) return;
  diagnosis["links"] = links_beside_cluster(config, cluster, measured);
  // A communication-bound verdict says how its group's link measured against the cluster's: the
  // group that carried its traffic (dp's gradients go over dp-cp when cp > 1).
  auto& verdict = diagnosis["verdict"];
  if (!verdict.is_object()) return;
  verdict.erase("link_detail");
  if (verdict.value("kind", "") != "communication-bound") return;
  const std::string where = verdict.value("where", "");
  for (const std::string& group : {where + "-cp", where}) {
    for (const auto& row : diagnosis["links"]) {
      // Of several groups of the kind, the slowest one's link (the one a step waits for).
      const bool several = row.contains("groups") && row.at("groups").size() > 1;
      const auto& fit = several ? row.at("slowest") : row;
      if (row.at("group") != group || !fit.contains("alpha_us")) continue;
      std::string which;
      if (several) which = " in its slowest group (ranks " + ranks_text(fit.at("ranks")) + ")";
      char measured[96];
      if (fit.contains("bandwidth_GBps")) {
        std::snprintf(measured, sizeof(measured), "%.0f us and %.3g GB/s", fit.at("alpha_us").get<double>(),
                      fit.at("bandwidth_GBps").get<double>());
      } else {
        std::snprintf(measured, sizeof(measured), "%.0f us, latency-bound (its time hardly grew with the size)",
                      fit.at("alpha_us").get<double>());
      }
      char text[288];
      std::snprintf(text, sizeof(text), "%s's link measured %s%s against the cluster's %.0f us and %.3g GB/s",
                    group.c_str(), measured, which.c_str(), row.at("cluster_alpha_us").get<double>(),
                    row.at("cluster_bandwidth_GBps").get<double>());
      verdict["link_detail"] = text;
      return;
    }
  }
}

nlohmann::json links_beside_cluster(const Config& config, const parallel::ClusterSpec& cluster,
                                    const nlohmann::json& probe) {
  const auto groups = group_links(config, cluster);
  nlohmann::json rows = nlohmann::json::array();
  for (auto row : probe) {
    const auto found = groups.find(row.at("group").get<std::string>());
    const bool intra = found == groups.end() || found->second.second;
    row["link"] = intra ? "intra-node" : "inter-node";
    row["cluster_alpha_us"] = (intra ? cluster.intra_latency : cluster.inter_latency) * 1e6;
    row["cluster_bandwidth_GBps"] = (intra ? cluster.intra_bandwidth : cluster.inter_bandwidth) / 1e9;
    rows.push_back(row);
  }
  return rows;
}

std::string format_links_beside_cluster(const nlohmann::json& rows) {
  std::ostringstream out;
  char line[256];
  // The sizes measured, from the first fitted row's points.
  double smallest = 0, largest = 0;
  for (const auto& r : rows) {
    if (!r.contains("points") || r.at("points").empty()) continue;
    smallest = r.at("points").front().at(0).get<double>(), largest = r.at("points").back().at(0).get<double>();
    break;
  }
  std::snprintf(line, sizeof(line),
                "each group's link, measured at the run's end (all-reduces of %.0f KiB to %.0f KiB; rank 0's group "
                "of each kind, then the others), beside the cluster's:\n",
                smallest / 1024.0, largest / 1024.0);
  out << line;
  out << "  group           ranks  link        alpha us      GB/s  cluster alpha us  cluster GB/s\n";
  for (const auto& r : rows) {
    if (!r.contains("alpha_us")) {
      std::snprintf(line, sizeof(line), "  %-14s  %5lld  %-10s  no fit: %s\n", r.at("group").get<std::string>().c_str(),
                    static_cast<long long>(r.at("ranks").get<int64_t>()), r.at("link").get<std::string>().c_str(),
                    r.value("no_fit", std::string("-")).c_str());
    } else {
      // A latency-bound group has no bandwidth to show ("-").
      char bandwidth[16] = "-";
      if (r.contains("bandwidth_GBps"))
        std::snprintf(bandwidth, sizeof(bandwidth), "%.3g", r.at("bandwidth_GBps").get<double>());
      std::snprintf(line, sizeof(line), "  %-14s  %5lld  %-10s  %8.1f  %8s  %16.1f  %12.3g\n",
                    r.at("group").get<std::string>().c_str(), static_cast<long long>(r.at("ranks").get<int64_t>()),
                    r.at("link").get<std::string>().c_str(), r.at("alpha_us").get<double>(), bandwidth,
                    r.at("cluster_alpha_us").get<double>(), r.at("cluster_bandwidth_GBps").get<double>());
    }
    out << line;
    // The kind's other groups (each measured by its own ranks), the slowest first, at most five.
    if (!r.contains("groups") || r.at("groups").size() < 2) continue;
    std::vector<nlohmann::json> others;
    for (const auto& g : r.at("groups"))
      if (g.at("ranks").at(0).get<int64_t>() != 0) others.push_back(g);  // rank 0's is the row's own
    std::sort(others.begin(), others.end(),
              [](const auto& a, const auto& b) { return a.value("largest_s", 0.0) > b.value("largest_s", 0.0); });
    for (size_t i = 0; i < others.size() && i < 5; ++i) {
      const auto& g = others[i];
      if (g.contains("bandwidth_GBps")) {
        std::snprintf(line, sizeof(line), "    its group of ranks %s: %.1f us, %.3g GB/s\n",
                      ranks_text(g.at("ranks")).c_str(), g.at("alpha_us").get<double>(),
                      g.at("bandwidth_GBps").get<double>());
      } else if (g.contains("alpha_us")) {
        std::snprintf(line, sizeof(line), "    its group of ranks %s: %.1f us, latency-bound\n",
                      ranks_text(g.at("ranks")).c_str(), g.at("alpha_us").get<double>());
      } else {
        std::snprintf(line, sizeof(line), "    its group of ranks %s: no fit\n", ranks_text(g.at("ranks")).c_str());
      }
      out << line;
    }
    if (others.size() > 5) out << "    and " << others.size() - 5 << " more\n";
  }
  return out.str();
}

}  // namespace loom::launch
