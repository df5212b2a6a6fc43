// loom plan --run DIR: the traffic the cost model predicts for a finished run's
// layout, beside what the run's communicators counted, rank by rank. Writes
// DIR/plan_vs_run.json and prints rank 0's side of it.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/config.h"
#include "core/errors.h"
#include "launch/commands.h"
#include "models/gpt_traffic.h"
#include "parallel/rank_grid.h"

namespace loom::launch {
namespace {

// Where a rank's sent bytes of a (group, op) go, as the layout and the nodes decide it. The
// communicator counts a ring collective's bytes as sent to the next rank of the group
// (parallel/communicator.cpp): all intra-node when that rank shares this one's node, all
// inter-node otherwise. For the others (send_recv, broadcast, all_to_all) only a group wholly on
// this rank's node (all intra) or wholly off it (all inter) decides; a mixed one does not.
enum class Side { intra, inter, mixed };

// A two-level group (parallel.dp_collectives: hierarchical) sends its ring collectives' bytes
// inside the node and across: all intra-node when the group is on one node, all inter-node when
// each node holds one of its ranks, both otherwise (hierarchical_communicator.h's formulas).
Side predicted_side(const std::string& op, const std::vector<int64_t>& group, int64_t rank,
                    const std::vector<int64_t>& node, bool two_level) {
  const auto node_of = [&](int64_t r) { return node.at(static_cast<size_t>(r)); };
  const auto p = static_cast<int64_t>(group.size());
  const auto me = std::find(group.begin(), group.end(), rank) - group.begin();
  const bool ring = op == "all_reduce" || op == "all_gather" || op == "reduce_scatter";
  if (p > 1 && me < p && ring && two_level) {
    const auto here = std::count_if(group.begin(), group.end(), [&](int64_t r) { return node_of(r) == node_of(rank); });
    return here == p ? Side::intra : here == 1 ? Side::inter : Side::mixed;
  }
  if (p > 1 && me < p && ring)
    return node_of(group[static_cast<size_t>((me + 1) % p)]) == node_of(rank) ? Side::intra : Side::inter;
  bool all_here = true, none_here = true;
  for (int64_t r : group) {
    if (r == rank) continue;
    (node_of(r) == node_of(rank) ? none_here : all_here) = false;
  }
  return all_here ? Side::intra : none_here ? Side::inter : Side::mixed;
}

}  // namespace

namespace {

int compare_with_run(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(run_dir);
  const fs::path traffic_path = dir / "traffic.json";
  if (!fs::exists(dir / "config.yaml")) throw InputError("run directory '" + run_dir + "' has no config.yaml");
  if (!fs::exists(traffic_path)) {
    throw InputError("run directory '" + run_dir + "' has no traffic.json (written when a run finishes)");
  }
  Config config = load_config((dir / "config.yaml").string());
  const auto& p = config.parallel;
  const int64_t world = p.tp * p.cp * p.pp * p.dp;
  resolve_and_validate(config, world);
  if (config.model.moe.enabled()) {
    throw InputError("loom plan --run: '" + run_dir +
                     "' trained a Mixture-of-Experts model, whose all-to-all volume "
                     "follows the router's choices, which the cost model cannot know; its metrics.jsonl has the "
                     "measured all-to-all bytes of every rank (moe.all_to_all) and traffic.json the counters");
  }
  if (p.grad_compression == GradCompression::int8 || p.grad_compression == GradCompression::powersgd) {
    // bf16's exchange is the step's model (models/gpt_traffic.cpp); int8 adds per-block scales and
    // PowerSGD switches from plain all-reduces at its start step, which the model leaves to
    // loom plan --cluster's byte formulas (launch/dp_variants.h).
    throw InputError("loom plan --run: '" + run_dir + "' compressed its gradients with parallel.grad_compression " +
                     to_string(p.grad_compression) +
                     ", whose exchange the step's cost model does not predict call by call (it does for none and "
                     "bf16); loom plan --cluster gives its bytes per step, and traffic.json has the counters");
  }
  // Evaluations run forward passes, ZeRO-3's gathers and loss reductions that the step's model
  // leaves out: a comparison would only say DIFFERS.
  if (std::ifstream metrics(dir / "metrics.jsonl"); metrics) {
    for (std::string line; std::getline(metrics, line);) {
      if (line.find("\"val_loss\"") == std::string::npos) continue;
      throw InputError("loom plan --run: '" + run_dir +
                       "' evaluated on validation data (metrics.jsonl has val_loss), whose forward passes the step's "
                       "cost model does not predict; traffic.json has the counters. A run without validation data "
                       "(no data.valid_path, no validation part in data.split) compares call by call");
    }
  }
  nlohmann::json traffic;
  try {
    std::ifstream(traffic_path) >> traffic;
  } catch (const std::exception& e) {
    throw InputError("cannot parse '" + traffic_path.string() + "': " + e.what());
  }
  if (traffic.value("world", int64_t{0}) != world) {
    throw InputError("'" + traffic_path.string() + "' is for another world size than config.yaml's layout");
  }
  const int64_t steps = traffic.at("steps").get<int64_t>();
  // Checkpoints saved in the run's steps (interval, the last step, exit_after, a stop by a signal or
  // train.exit_duration_mins).
  const int64_t last = traffic.value("last_step", steps), first = last - steps + 1;
  const bool stopped_early = traffic.value("stopped_early", false);
  int64_t saves = 0;
  for (int64_t s = first; s <= last; ++s) {
    const auto& ck = config.checkpoint;
    // (With a checkpoint.dir the last step is always saved, whatever the interval.)
    if ((!ck.dir.empty() && s == config.train.steps) || (ck.interval > 0 && s % ck.interval == 0) ||
        s == config.train.exit_after || (stopped_early && s == last && !ck.dir.empty()))
      ++saves;
  }
  parallel::RankGrid grid({p.tp, p.pp, p.dp, p.ep, p.cp, p.dp_shard}, p.order);
  grid.require_even_hsdp();  // an uneven HSDP cut of an expert-dp group: exit 2 naming parallel.dp_shard
  // The nodes the run's traffic report found (one node for reports written before it had them).
  std::vector<int64_t> node(static_cast<size_t>(world), 0);
  if (traffic.contains("nodes")) {
    for (size_t n = 0; n < traffic.at("nodes").size(); ++n)
      for (const auto& r : traffic.at("nodes")[n]) node.at(r.get<size_t>()) = static_cast<int64_t>(n);
  }
  // Each group kind's group of each rank, by the kind's name as the counters have it.
  std::map<std::string, std::vector<std::vector<int64_t>>> groups_of_kind;
  for (auto kind : parallel::kAllGroupKinds) groups_of_kind[parallel::group_kind_name(kind)] = grid.groups(kind);
  auto group_of = [&](const std::string& name, int64_t rank) {
    for (const auto& g : groups_of_kind[name])
      if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
    return std::vector<int64_t>{};
  };

  // The gradient groups that ran in two levels (ProcessGroups::use_two_level_gradient_groups).
  std::set<std::string> two_level_groups;
  if (p.dp_collectives == DpCollectives::hierarchical) {
    using parallel::GroupKind;
    for (auto kind : p.cp == 1 ? std::vector{GroupKind::dp, GroupKind::expert_dp}
                               : std::vector{GroupKind::dp_cp, GroupKind::expert_dp_cp}) {
      two_level_groups.insert(parallel::group_kind_name(kind));
    }
  }

  nlohmann::json out;
  out["steps"] = steps;
  bool all_equal = true;
  for (int64_t rank = 0; rank < world; ++rank) {
    const auto predicted = models::predict_gpt_step_traffic(config, grid.coords(rank));
    const auto& measured = traffic.at("ranks").at(static_cast<size_t>(rank)).at("groups");
    // Every (group, op) either side has, except the world group's end-of-run barrier.
    std::map<std::pair<std::string, std::string>, std::pair<models::PredictedTraffic, models::PredictedTraffic>> rows;
    for (const auto& [key, value] : predicted) rows[key].first = {value.calls * steps, value.bytes * steps};
    for (const auto& [key, value] : models::predict_gpt_checkpoint_traffic(config, grid.coords(rank))) {
      rows[key].first.calls += value.calls * saves;
      rows[key].first.bytes += value.bytes * saves;
    }
    if (traffic.value("resumed", false)) {
      for (const auto& [key, value] : models::predict_gpt_resume_traffic(config, grid.coords(rank))) {
        rows[key].first.calls += value.calls;
        rows[key].first.bytes += value.bytes;
      }
    }
    std::map<std::pair<std::string, std::string>, std::array<int64_t, 3>> sent;  // sent, intra, inter
    for (const auto& [group, ops] : measured.items()) {
      if (group == "world") continue;
      for (const auto& [op, c] : ops.items()) {
        rows[{group, op}].second = {c.at("calls").get<int64_t>(), c.at("bytes").get<int64_t>()};
        sent[{group, op}] = {c.at("sent").get<int64_t>(), c.value("sent_intra_node", int64_t{-1}),
                             c.value("sent_inter_node", int64_t{-1})};
      }
    }
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& [key, pair] : rows) {
      bool equal = pair.first.calls == pair.second.calls && pair.first.bytes == pair.second.bytes;
      nlohmann::json entry = {{"group", key.first},
                              {"op", key.second},
                              {"predicted_calls", pair.first.calls},
                              {"measured_calls", pair.second.calls},
                              {"predicted_bytes", pair.first.bytes},
                              {"measured_bytes", pair.second.bytes}};
      // Intra- and inter-node bytes: predicted where the layout decides them, always summing to sent.
      const auto counted = sent.find(key);
      if (counted != sent.end() && counted->second[1] >= 0) {
        const auto [all, intra, inter] = counted->second;
        const auto side =
            predicted_side(key.second, group_of(key.first, rank), rank, node, two_level_groups.count(key.first) > 0);
        equal = equal && intra + inter == all && (side == Side::mixed || (side == Side::intra ? inter : intra) == 0);
        entry["predicted_side"] = side == Side::intra ? "intra-node" : side == Side::inter ? "inter-node" : "mixed";
        entry["measured_sent_intra_node"] = intra;
        entry["measured_sent_inter_node"] = inter;
      }
      all_equal = all_equal && equal;
      entry["equal"] = equal;
      entries.push_back(entry);
    }
    out["ranks"].push_back({{"rank", rank}, {"entries", entries}});
    if (rank == 0) {
      std::printf("rank 0 of %lld, per step: predicted by the cost model vs counted in the run\n",
                  static_cast<long long>(world));
      std::printf("  %-15s %-15s %12s %12s %14s %14s %16s\n", "group", "op", "calls pred", "calls run", "bytes pred",
                  "bytes run", "inter-node share");
      for (const auto& e : entries) {
        std::string inter = "-";
        if (e.contains("measured_sent_inter_node")) {
          const double total =
              e["measured_sent_intra_node"].get<double>() + e["measured_sent_inter_node"].get<double>();
          inter = total > 0 ? std::to_string(static_cast<int>(
                                  std::lround(100.0 * e["measured_sent_inter_node"].get<double>() / total))) +
                                  "%"
                            : "-";
        }
        std::printf("  %-15s %-15s %12.1f %12.1f %14.0f %14.0f %16s%s\n", e["group"].get<std::string>().c_str(),
                    e["op"].get<std::string>().c_str(), e["predicted_calls"].get<double>() / steps,
                    e["measured_calls"].get<double>() / steps, e["predicted_bytes"].get<double>() / steps,
                    e["measured_bytes"].get<double>() / steps, inter.c_str(),
                    e["equal"].get<bool>() ? "" : "   <- differs");
      }
    }
  }
  out["all_equal"] = all_equal;
  std::ofstream(dir / "plan_vs_run.json") << out.dump(1) << "\n";
  std::printf("%s: every rank's predicted traffic %s the counters (details in %s)\n", run_dir.c_str(),
              all_equal ? "equals" : "DIFFERS FROM", (dir / "plan_vs_run.json").string().c_str());
  for (const auto& d : traffic.value("diagnostics", nlohmann::json::array())) {
    std::printf("note: %s\n", d.get<std::string>().c_str());
  }
  return 0;
}

}  // namespace

int plan_run(const std::string& run_dir) {
  // traffic.json is loom's own; one that is edited or damaged has the wrong types, lists or
  // indices somewhere, which nlohmann and std::vector report in their own words.
  const std::string traffic = (std::filesystem::path(run_dir) / "traffic.json").string();
  try {
    return compare_with_run(run_dir);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("'" + traffic + "' is not a traffic report as loom writes it (damaged or edited?): " + e.what());
  } catch (const std::out_of_range& e) {
    throw InputError("'" + traffic +
                     "' holds a rank or node outside the run's world (damaged or edited?): " + e.what());
  }
}

}  // namespace loom::launch
