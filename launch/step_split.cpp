#include "launch/step_split.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "launch/diagnose_plan.h"

namespace loom::launch {
namespace {

// The groups and ops the split is gathered by (a fixed layout, the same on every rank).
const std::vector<std::string> kGroups = {"tp", "cp", "pp", "dp", "ep", "expert-dp", "other"};
const std::vector<std::string> kOps = {"all_reduce", "all_gather", "reduce_scatter",
                                       "all_to_all", "send_recv",  "other"};

size_t group_class(const std::string& group) {
  // The gradient groups under cp and HSDP count as dp's (expert-dp's).
  if (group == "dp-cp" || group == "dp-shard" || group == "dp-replicate") return 3;
  if (group == "expert-dp-cp" || group == "expert-dp-shard" || group == "expert-dp-replicate") return 5;
  const auto it = std::find(kGroups.begin(), kGroups.end(), group);
  return it == kGroups.end() ? kGroups.size() - 1 : static_cast<size_t>(it - kGroups.begin());
}
size_t op_class(const std::string& op) {
  const auto it = std::find(kOps.begin(), kOps.end(), op);
  return it == kOps.end() ? kOps.size() - 1 : static_cast<size_t>(it - kOps.begin());
}

constexpr size_t kHead = 6;  // stage, steps, step, data, optimizer, checkpoint

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof(text), "%.0f%%", 100.0 * share);
  return text;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0.0;
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2.0;
}

}  // namespace

void StepClock::begin_step() {
  current_ = Split{};
  blocked_at_start_ = stats_.blocked_by_op();
}

void StepClock::add(Part part, double seconds) {
  // A checkpoint is saved after its step's row: the loop's stall counts in the next step.
  (part == Part::data ? current_.data : part == Part::optimizer ? current_.optimizer : pending_checkpoint_) += seconds;
}

void StepClock::end_step(double step_s, bool counted) {
  current_.step = step_s + pending_checkpoint_;
  current_.checkpoint = pending_checkpoint_;
  pending_checkpoint_ = 0;
  for (const auto& [key, seconds] : stats_.blocked_by_op()) {
    const auto before = blocked_at_start_.find(key);
    const double during = seconds - (before == blocked_at_start_.end() ? 0.0 : before->second);
    if (during > 0) current_.exposed[key] = during;
  }
  last_ = current_;
  if (!counted) return;
  ++steps_;
  total_.step += current_.step;
  total_.data += current_.data;
  total_.optimizer += current_.optimizer;
  total_.checkpoint += current_.checkpoint;
  for (const auto& [key, seconds] : current_.exposed) total_.exposed[key] += seconds;
}

nlohmann::json StepClock::last_step_json() const {
  nlohmann::json exposed = nlohmann::json::object();
  double waited = 0;
  for (const auto& [key, seconds] : last_.exposed) {
    exposed[key.first + "/" + key.second] = seconds * 1000.0;
    waited += seconds;
  }
  const double compute = std::max(0.0, last_.step - waited - last_.data - last_.optimizer - last_.checkpoint);
  return {{"compute_ms", compute * 1000.0},
          {"data_ms", last_.data * 1000.0},
          {"optimizer_ms", last_.optimizer * 1000.0},
          {"checkpoint_ms", last_.checkpoint * 1000.0},
          {"exposed_ms", exposed}};
}

nlohmann::json StepClock::diagnose(parallel::Communicator& world, int64_t pp_stage, const Config& config) const {
  const size_t width = kHead + kGroups.size() * kOps.size();
  auto mine = torch::zeros({static_cast<int64_t>(width)}, torch::kFloat64);
  auto* v = mine.data_ptr<double>();
  const double n = std::max<int64_t>(steps_, 1);
  v[0] = static_cast<double>(pp_stage);
  v[1] = static_cast<double>(steps_);
  v[2] = total_.step / n, v[3] = total_.data / n, v[4] = total_.optimizer / n, v[5] = total_.checkpoint / n;
  for (const auto& [key, seconds] : total_.exposed)
    v[kHead + group_class(key.first) * kOps.size() + op_class(key.second)] += seconds / n;
  auto all = torch::zeros({world.size(), static_cast<int64_t>(width)}, torch::kFloat64);
  world.all_gather(all, mine).wait();
  if (world.rank() != 0) return nullptr;

  const bool zero3 = config.parallel.zero_stage == 3;
  nlohmann::json ranks = nlohmann::json::array();
  std::map<std::string, double> category;                        // mean seconds per step over the ranks
  std::map<std::string, std::pair<std::string, double>> top_op;  // group -> its largest op
  double mean_step = 0, mean_compute = 0;
  std::map<int64_t, std::vector<double>> own_by_stage;
  std::vector<double> own(static_cast<size_t>(world.size()));
  for (int64_t r = 0; r < world.size(); ++r) {
    const auto* row = all[r].data_ptr<double>();
    nlohmann::json exposed = nlohmann::json::object();
    double waited = 0;
    for (size_t g = 0; g < kGroups.size(); ++g) {
      for (size_t o = 0; o < kOps.size(); ++o) {
        const double s = row[kHead + g * kOps.size() + o];
        if (s <= 0) continue;
        exposed[kGroups[g]][kOps[o]] = s * 1000.0;
        waited += s;
        std::string cat = kGroups[g] == "pp" ? "pipeline idle" : "communication " + kGroups[g];
        if (zero3 && kGroups[g] == "dp" && kOps[o] == "all_gather") cat = "ZeRO-3 gathers";
        category[cat] += s / static_cast<double>(world.size());
        auto& top = top_op[cat];
        if (s > top.second) top = {kOps[o], s};
      }
    }
    const double compute = std::max(0.0, row[2] - waited - row[3] - row[4] - row[5]);
    category["data"] += row[3] / static_cast<double>(world.size());
    if (row[5] > 0) category["checkpoint"] += row[5] / static_cast<double>(world.size());
    mean_step += row[2] / static_cast<double>(world.size());
    mean_compute += (compute + row[4]) / static_cast<double>(world.size());
    own[static_cast<size_t>(r)] = compute + row[3] + row[4] + row[5];
    own_by_stage[static_cast<int64_t>(row[0])].push_back(own[static_cast<size_t>(r)]);
    ranks.push_back({{"rank", r},
                     {"stage", static_cast<int64_t>(row[0])},
                     {"step_ms", row[2] * 1000.0},
                     {"compute_ms", compute * 1000.0},
                     {"data_ms", row[3] * 1000.0},
                     {"optimizer_ms", row[4] * 1000.0},
                     {"checkpoint_ms", row[5] * 1000.0},
                     {"exposed_ms", exposed}});
  }
  nlohmann::json d = {{"steps", steps_},
                      {"world", world.size()},
                      {"mean_step_ms", mean_step * 1000.0},
                      {"compute_share", mean_step > 0 ? mean_compute / mean_step : 0.0},
                      {"ranks", ranks}};
  nlohmann::json shares = nlohmann::json::object();
  for (const auto& [cat, s] : category) shares[cat] = mean_step > 0 ? s / mean_step : 0.0;
  d["shares"] = shares;
  const int64_t p = config.parallel.pp, m = config.micro_batches_per_step(), vs = config.parallel.virtual_stages;
  if (p > 1) d["bubble_formula"] = static_cast<double>(p - 1) / static_cast<double>(vs * m + p - 1);

  if (steps_ == 0) {  // a run stopped in its first step: no share to rank, where "compute-bound: 0%" was said
    d["verdict"] = {{"kind", "unmeasured"},
                    {"where", ""},
                    {"detail", "no step was measured (the first step of a run or a resume is left out as a warm-up)"}};
    return d;
  }
  // The ladder: a straggler first (its peers' waits are its doing), then the largest part.
  nlohmann::json verdict = {{"kind", "compute-bound"}, {"where", ""}};
  double worst_excess = 0;
  for (int64_t r = 0; r < world.size(); ++r) {
    const auto& peers = own_by_stage[ranks[static_cast<size_t>(r)]["stage"].get<int64_t>()];
    if (peers.size() < 2) continue;
    const double mid = median(peers), mine_own = own[static_cast<size_t>(r)];
    const double excess = mine_own - mid;
    if (mine_own > 1.25 * mid && excess > 0.1 * mean_step && excess > worst_excess) {
      worst_excess = excess;
      verdict = {{"kind", "straggler-bound"},
                 {"where", "rank " + std::to_string(r)},
                 {"detail", "its own time " + percent(mid > 0 ? mine_own / mid - 1.0 : 0.0) +
                                " above its stage's median, which the others wait for"}};
    }
  }
  if (verdict["kind"] == "compute-bound") {
    std::string largest;
    double share = 0;
    for (const auto& [cat, s] : category) {
      const double sh = mean_step > 0 ? s / mean_step : 0.0;
      if (sh > share) largest = cat, share = sh;
    }
    if (share >= 0.25) {
      if (largest == "data") {
        verdict = {{"kind", "input-bound"}, {"where", "data"}, {"detail", "reading batches takes " + percent(share)}};
      } else if (largest == "checkpoint") {
        verdict = {{"kind", "checkpoint-bound"},
                   {"where", ""},
                   {"detail", "saving checkpoints stalls training " + percent(share) + " of the time" +
                                  (config.checkpoint.async ? "" : " (checkpoint.async: true writes them meanwhile)") +
                                  "; checkpoint.interval is " + std::to_string(config.checkpoint.interval)}};
      } else if (largest == "pipeline idle") {
        std::string formula;
        if (d.contains("bubble_formula"))
          formula = " (the schedule's (p - 1) / (v m + p - 1) is " + percent(d["bubble_formula"].get<double>()) + ")";
        verdict = {{"kind", "bubble-bound"}, {"where", "pp"}, {"detail", "pipeline idle " + percent(share) + formula}};
      } else if (largest == "ZeRO-3 gathers") {
        verdict = {{"kind", "memory-bound"},
                   {"where", "dp"},
                   {"detail", "ZeRO-3's parameter gathers exposed " + percent(share)}};
      } else {
        const std::string group = largest.substr(largest.find(' ') + 1);
        verdict = {{"kind", "communication-bound"},
                   {"where", group},
                   {"detail", group + " " + top_op[largest].first + " exposed " + percent(share) + " of the step"}};
      }
    } else {
      verdict["detail"] =
          "compute and the optimizer take " + percent(d["compute_share"].get<double>()) + " of the step";
    }
  }
  d["verdict"] = verdict;
  return d;
}

std::string format_diagnosis(const nlohmann::json& d) {
  std::ostringstream out;
  const auto& v = d.at("verdict");
  if (d.at("steps").get<int64_t>() == 0) return "verdict: unmeasured: " + v.value("detail", "") + "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "time per step (mean of %lld steps over %lld ranks): %.1f ms\n",
                static_cast<long long>(d.at("steps").get<int64_t>()),
                static_cast<long long>(d.at("world").get<int64_t>()), d.at("mean_step_ms").get<double>());
  out << line;
  out << "  compute and optimizer " << percent(d.at("compute_share").get<double>());
  for (const auto& [cat, share] : d.at("shares").items()) out << " | " << cat << " " << percent(share.get<double>());
  out << "\n";
  out << "  rank  stage   step ms  compute ms  data ms  optimizer ms  checkpoint ms  exposed ms\n";
  for (const auto& r : d.at("ranks")) {
    double exposed = 0;
    for (const auto& [group, ops] : r.at("exposed_ms").items())
      for (const auto& [op, ms] : ops.items()) exposed += ms.get<double>();
    std::snprintf(line, sizeof(line), "  %4lld  %5lld  %8.1f  %10.1f  %7.1f  %12.1f  %13.1f  %10.1f\n",
                  static_cast<long long>(r.at("rank").get<int64_t>()),
                  static_cast<long long>(r.at("stage").get<int64_t>()), r.at("step_ms").get<double>(),
                  r.at("compute_ms").get<double>(), r.at("data_ms").get<double>(), r.at("optimizer_ms").get<double>(),
                  r.at("checkpoint_ms").get<double>(), exposed);
    out << line;
  }
  if (d.contains("collectives")) out << format_collectives_beside_cluster(d.at("collectives"));
  if (d.contains("links")) out << format_links_beside_cluster(d.at("links"));
  if (d.contains("plan")) out << format_plan_beside_measured(d.at("plan"));
  std::string detail = v.value("detail", "");
  if (d.contains("mfu") && v.at("kind") == "compute-bound") detail += "; " + d.at("mfu").get<std::string>();
  // Its group's link against the cluster's (launch/diagnose_plan.h's add_plan_comparison).
  if (v.contains("link_detail")) detail += "; " + v.at("link_detail").get<std::string>();
  // A group whose bytes crossed nodes (launch/step_report.h's note_inter_node): "dp inter-node".
  const std::string where =
      v.at("where").get<std::string>() + (v.contains("link") ? " " + v.at("link").get<std::string>() : "");
  out << "verdict: " << v.at("kind").get<std::string>() << (where.empty() ? "" : " " + where)
      << (detail.empty() ? "" : ": " + detail) << "\n";
  return out.str();
}

}  // namespace loom::launch
