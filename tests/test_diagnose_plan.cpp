// loom diagnose --cluster: the measured split beside the cost model's prediction for the same
// layout, part by part, and the part that deviates most (launch/diagnose_plan.h).
#include <catch2/catch.hpp>

#include "core/config.h"
#include "launch/diagnose_plan.h"
#include "launch/layout_cost.h"

using namespace loom::launch;

namespace {

// A 4-layer GPT of hidden 64 on 8 ranks at tp x pp x dp, micro-batches of 2.
loom::Config small_gpt(int64_t tp, int64_t pp, int64_t dp) {
  loom::Config c;
  c.model.num_layers = 4;
  c.model.hidden_size = 64;
  c.model.num_heads = 4;
  c.model.vocab_size = 256;
  c.model.seq_len = 32;
  c.train.global_batch_size = 8;
  c.train.micro_batch_size = 2;
  c.parallel.tp = tp;
  c.parallel.pp = pp;
  c.parallel.dp = dp;
  loom::resolve_and_validate(c, tp * pp * dp);
  return c;
}

// A cluster slow enough that every part of the prediction is well above a microsecond.
loom::parallel::ClusterSpec slow_cluster() {
  loom::parallel::ClusterSpec s;
  s.name = "slow";
  s.gpus_per_node = 8;
  s.nodes = 1;
  s.peak_flops = 1e9;
  s.memory_bytes = 1e12;
  s.intra_bandwidth = 1e7;
  s.intra_latency = 1e-4;
  s.inter_bandwidth = 1e6;
  s.inter_latency = 1e-3;
  s.compute_efficiency = 0.5;
  return s;
}

}  // namespace

TEST_CASE("diagnose beside the plan: the prediction in the diagnosis's parts, and the largest deviation", "[plan]") {
  const auto config = small_gpt(2, 2, 2);
  const auto cluster = slow_cluster();
  const auto e = estimate_layout(config, cluster, Layout{2, 2, 2, 1, 0, 2, loom::Recompute::none, 1});
  double tp_s = 0, pp_s = 0, dp_s = 0;
  for (const auto& t : e.traffic) (t.group == "tp" ? tp_s : t.group == "pp" ? pp_s : dp_s) = t.seconds;
  REQUIRE(tp_s > 0);
  REQUIRE(pp_s > 0);
  REQUIRE(dp_s > 0);
  // A measured step of 100 ms: compute 40%, tp 10%, pipeline idle 20%, dp 30%.
  const nlohmann::json diagnosis = {
      {"mean_step_ms", 100.0},
      {"compute_share", 0.4},
      {"shares", {{"communication tp", 0.1}, {"pipeline idle", 0.2}, {"communication dp", 0.3}}}};
  const auto c = plan_beside_measured(config, cluster, diagnosis);
  std::map<std::string, std::pair<double, double>> parts;
  for (const auto& r : c["parts"])
    parts[r["part"].get<std::string>()] = {r["measured_ms"].get<double>(), r["predicted_ms"].get<double>()};
  CHECK(parts.size() == 4);
  CHECK(parts["compute and optimizer"].first == Approx(40.0));
  CHECK(parts["compute and optimizer"].second == Approx(e.compute_s * 1e3));
  CHECK(parts["communication tp"].second == Approx(tp_s * 1e3));
  // Pipeline idle: the bubble's stretch of the critical path (compute, tp, pp) and the pp transfers.
  const double critical = e.compute_s + tp_s + pp_s;
  CHECK(parts["pipeline idle"].second == Approx((critical / (1 - e.bubble) - critical + pp_s) * 1e3));
  // dp: what two thirds of compute does not hide.
  CHECK(parts["communication dp"].second == Approx(std::max(0.0, dp_s - 2.0 / 3.0 * e.compute_s) * 1e3));
  CHECK(c["step"]["predicted_ms"].get<double>() == Approx(e.step_s * 1e3));
  // The largest |measured - predicted| is named.
  std::string worst;
  double gap = -1;
  for (const auto& [part, mp] : parts)
    if (std::abs(mp.first - mp.second) > gap) gap = std::abs(mp.first - mp.second), worst = part;
  CHECK(c["largest_deviation"]["part"] == worst);
  const auto text = format_plan_beside_measured(c);
  CHECK_THAT(text, Catch::Contains("beside loom plan's prediction for this layout on slow:") &&
                       Catch::Contains("largest deviation: " + worst));
  // A part only the run has (slow batch reads) is compared with a prediction of 0.
  nlohmann::json slow_data = diagnosis;
  slow_data["shares"]["data"] = 0.9;
  const auto d = plan_beside_measured(config, cluster, slow_data);
  CHECK(d["largest_deviation"]["part"] == "data");
  CHECK(d["largest_deviation"]["predicted_ms"].get<double>() == 0.0);
}

TEST_CASE("diagnose beside the cluster: each collective's time per call against alpha-beta on its link", "[plan]") {
  const auto config = small_gpt(2, 1, 4);
  auto cluster = slow_cluster();
  cluster.gpus_per_node = 4;  // tp pairs stay in a node, the dp group (ranks 0, 2, 4, 6) spans two
  // Two ranks' counters over 5 steps: 10 tp all-reduces of 4 KiB each, 1 ms each; 5 dp all-reduces
  // of 64 KiB, 3 and 5 ms.
  auto rank = [](double dp_seconds) {
    return nlohmann::json{
        {"groups",
         {{"tp", {{"all_reduce", {{"calls", 10}, {"bytes", 40960}, {"sent", 0}, {"seconds", 0.01}}}}},
          {"dp", {{"all_reduce", {{"calls", 5}, {"bytes", 5 * 65536}, {"sent", 0}, {"seconds", dp_seconds}}}}},
          {"world", {{"barrier", {{"calls", 1}, {"bytes", 0}, {"sent", 0}, {"seconds", 0.5}}}}}}}};
  };
  const nlohmann::json traffic = {{"steps", 5}, {"ranks", {rank(0.015), rank(0.025)}}};
  const auto rows = collectives_beside_cluster(config, cluster, traffic);
  REQUIRE(rows.size() == 2);  // barriers carry no bytes to compare
  // The largest measured time per step first: dp, 1 call of 4 ms mean per step, against tp's 2 of 1 ms.
  CHECK(rows[0]["group"] == "dp");
  CHECK(rows[0]["link"] == "inter-node");
  CHECK(rows[0]["ranks"] == 4);
  CHECK(rows[0]["calls_per_step"].get<double>() == Approx(1.0));
  CHECK(rows[0]["bytes_per_call"].get<double>() == Approx(65536.0));
  CHECK(rows[0]["measured_ms_per_call"].get<double>() == Approx(4.0));
  CHECK(rows[0]["predicted_ms_per_call"].get<double>() ==
        Approx(1e3 * ring_all_reduce_time(65536.0, 4, cluster.inter_latency, 1.0 / cluster.inter_bandwidth)));
  CHECK(rows[1]["group"] == "tp");
  CHECK(rows[1]["link"] == "intra-node");
  CHECK(rows[1]["calls_per_step"].get<double>() == Approx(2.0));
  CHECK(rows[1]["measured_ms_per_call"].get<double>() == Approx(1.0));
  CHECK(rows[1]["predicted_ms_per_call"].get<double>() ==
        Approx(1e3 * ring_all_reduce_time(4096.0, 2, cluster.intra_latency, 1.0 / cluster.intra_bandwidth)));
  CHECK_THAT(format_collectives_beside_cluster(rows), Catch::Contains("dp              all_reduce"));
}
