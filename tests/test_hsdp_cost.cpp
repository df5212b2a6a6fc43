// HSDP (parallel.dp_shard) in the cost model: ZeRO's state over the shard group, its traffic split
// into the shard group's passes and the replicas' all-reduce, and loom plan --cluster's HSDP row.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "launch/dp_variants.h"
#include "launch/layout_cost.h"
#include "two_node_cluster.h"

using namespace loom::parallel;
using namespace loom::launch;

TEST_CASE("HSDP: state sharded inside the node, one share of the gradients across", "[plan]") {
  const loom::Config c = loom::test::small_gpt_for_plan();
  const ClusterSpec cluster = loom::test::two_node_cluster();
  Layout l;
  l.dp = 8;
  l.micro_batch = 4;
  l.zero_stage = 3;
  const auto e3 = estimate_layout(c, cluster, l);
  Layout h = l;
  h.dp_shard = 4;  // a node's ranks
  const auto eh = estimate_layout(c, cluster, h);
  const double n = e3.parameters_per_rank, S = n * 4;  // fp32 gradients and parameters
  // The state: ZeRO-3's 16 B per parameter over the shard group's 4 ranks instead of all 8.
  CHECK(eh.state_bytes == Approx(16.0 * n / 4));
  CHECK(e3.state_bytes == Approx(16.0 * n / 8));
  // The traffic by group: ZeRO's passes inside the node, each 1/4 share all-reduced across 2 replicas.
  // One micro-batch a step (32 sequences over dp 8 in micro-batches of 4): the gradients reduce-
  // scattered once, each of the 4 blocks gathered for the forward and again for the backward, the
  // embeddings and output once: 1 + b passes of the parameters (b: the blocks' share), in 4 + 1
  // and 2 x 4 + 1 calls; the replicas all-reduce each of the 5 reductions' shares.
  const double b = block_parameter_fraction(c);
  REQUIRE(b > 0.5);
  REQUIRE(b < 1.0);
  REQUIRE(eh.traffic.size() == 2);
  CHECK(eh.traffic[0].group == "dp-shard");
  CHECK(eh.traffic[0].link == "intra-node");
  CHECK(eh.traffic[0].bytes == Approx(3.0 / 4 * S * (2 + b)));
  CHECK(eh.traffic[1].group == "dp-replicate");
  CHECK(eh.traffic[1].link == "inter-node");
  CHECK(eh.traffic[1].bytes == Approx(2.0 * 1 / 2 * S / 4));
  const double replica_s = 1.0 / 2 * 2 * S / 4 * 1e-9 + 5 * 2 * 1e-5;
  CHECK(eh.dp_s == Approx(3.0 / 4 * S * (2 + b) * 1e-10 + 14 * 3 * 1e-6 + replica_s));
  // Over NCCL the step across the replicas starts only once its shard step is waited for: backward
  // hides none of it. Over Gloo a thread issues it at once: hidden like the rest.
  CHECK(eh.dp_unhidden_s == Approx(replica_s));
  CHECK(exposed_dp_seconds(eh.dp_s, eh.dp_unhidden_s, 1e9) == Approx(eh.dp_unhidden_s));
  CHECK(exposed_dp_seconds(eh.dp_s, eh.dp_unhidden_s, 0) == Approx(eh.dp_s));
  auto gloo = cluster;
  gloo.backend = "gloo";
  const auto eg = estimate_layout(c, gloo, h);
  CHECK(eg.dp_s == Approx(eh.dp_s));
  CHECK(eg.dp_unhidden_s == 0);
  CHECK(exposed_dp_seconds(eg.dp_s, eg.dp_unhidden_s, 1e9) == 0);
  CHECK(eg.step_s < eh.step_s);
  // loom plan --cluster's row: the same bytes, 2 / (2 + b) of hierarchical's across nodes at ZeRO-3
  // (whose 2 + b passes each send a share over the slow link).
  const auto hsdp = dp_variant_cost(c, cluster, e3, {loom::DpCollectives::flat, loom::GradCompression::none, 1, true});
  const auto two = dp_variant_cost(c, cluster, e3, {loom::DpCollectives::hierarchical, loom::GradCompression::none, 1});
  REQUIRE(hsdp.allowed);
  CHECK(hsdp.dp_shard == 4);
  CHECK(hsdp.intra_bytes == Approx(3.0 / 4 * S * (2 + b)));
  CHECK(hsdp.inter_bytes == Approx(2.0 * 1 / 2 * S / 4));
  CHECK(two.inter_bytes == Approx((2 + b) * 1.0 / 2 * S / 4));
  CHECK(hsdp.seconds == Approx(eh.dp_s));
  const auto hsdp_gloo =
      dp_variant_cost(c, gloo, e3, {loom::DpCollectives::flat, loom::GradCompression::none, 1, true});
  CHECK(hsdp_gloo.seconds == Approx(hsdp.seconds));
  CHECK(hsdp_gloo.step_s < hsdp.step_s);
  CHECK(hsdp.seconds < two.seconds);
  bool offered = false;
  for (const auto& v : dp_variants(c, cluster, e3)) offered = offered || v.variant.hsdp;
  CHECK(offered);
  // Not at ZeRO 0 (nothing to shard), nor where the larger shards do not fit.
  Layout z0 = l;
  z0.zero_stage = 0;
  const auto e0 = estimate_layout(c, cluster, z0);
  CHECK_FALSE(
      dp_variant_cost(c, cluster, e0, {loom::DpCollectives::flat, loom::GradCompression::none, 1, true}).allowed);
  ClusterSpec small = cluster;
  small.memory_bytes = (e3.memory_bytes + eh.memory_bytes) / 2;  // ZeRO-3 over 8 fits, over 4 does not
  const auto es = estimate_layout(c, small, l);
  REQUIRE(es.fits);
  CHECK_FALSE(dp_variant_cost(c, small, es, {loom::DpCollectives::flat, loom::GradCompression::none, 1, true}).allowed);
}

TEST_CASE("two-level collectives: over NCCL the steps after the node's reduce-scatter show", "[plan]") {
  const loom::Config c = loom::test::small_gpt_for_plan();
  const ClusterSpec nccl = loom::test::two_node_cluster();
  auto gloo = nccl;
  gloo.backend = "gloo";
  const loom::DpCollectives two_level = loom::DpCollectives::hierarchical;
  for (const int64_t stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    Layout l;
    l.dp = 8;  // 4 ranks on each of 2 nodes
    l.micro_batch = 4;
    l.zero_stage = stage;
    const auto e = estimate_layout(c, nccl, l);
    const auto over_nccl = dp_variant_cost(c, nccl, e, {two_level, loom::GradCompression::none, 1});
    const auto over_gloo =
        dp_variant_cost(c, gloo, estimate_layout(c, gloo, l), {two_level, loom::GradCompression::none, 1});
    const double S = e.parameters_per_rank * 4, L = 4, N = 2;
    const double intra_pass = (L - 1) / L * S * 1e-10 + (L - 1) * 1e-6;
    const double inter_pass = (N - 1) / N * S / L * 1e-9 + (N - 1) * 1e-5;
    CHECK(over_nccl.seconds == Approx(over_gloo.seconds));
    // ZeRO-0 all-reduces each bucket: after the node's reduce-scatter, the all-reduce across the
    // nodes and the node's all-gather. ZeRO 1-3 reduce-scatter: the step across the nodes, of the
    // one bucket at ZeRO-1, of each of the 4 blocks and the rest at ZeRO 2 and 3.
    const double later = stage == 0 ? over_nccl.seconds - intra_pass : inter_pass + (stage >= 2 ? 4 * 1e-5 : 0.0);
    CHECK(over_nccl.unhidden_s == Approx(later));
    if (stage == 0) CHECK(over_nccl.unhidden_s == Approx(2 * inter_pass + intra_pass));
    CHECK(over_gloo.unhidden_s == 0);
    CHECK(over_nccl.step_s > over_gloo.step_s);
    // The flat ring has no later steps on either backend.
    const auto flat = dp_variant_cost(c, nccl, e, {loom::DpCollectives::flat, loom::GradCompression::none, 1});
    CHECK(flat.unhidden_s == 0);
  }
  // Four micro-batches a step: ZeRO 2 and 3 reduce-scatter each block after each backward, so the
  // step across the nodes comes b x 4 + (1 - b) times (b: the blocks' share), in 4 x 4 + 1 calls.
  for (const int64_t stage : {2, 3}) {
    CAPTURE(stage);
    Layout l;
    l.dp = 8;
    l.micro_batch = 1;
    l.zero_stage = stage;
    const auto e = estimate_layout(c, nccl, l);
    const double S = e.parameters_per_rank * 4, b = block_parameter_fraction(c);
    CHECK(dp_variant_cost(c, nccl, e, {two_level, loom::GradCompression::none, 1}).unhidden_s ==
          Approx((b * 4 + 1 - b) * 1.0 / 2 * S / 4 * 1e-9 + 17 * 1e-5));
  }
}

TEST_CASE("compressed reductions: the step after the exchange shows on either backend", "[plan]") {
  const loom::Config c = loom::test::small_gpt_for_plan();
  const ClusterSpec nccl = loom::test::two_node_cluster();
  auto gloo = nccl;
  gloo.backend = "gloo";
  Layout l;
  l.dp = 8;  // 4 ranks on each of 2 nodes
  l.micro_batch = 4;
  for (const ClusterSpec* cluster : {&nccl, static_cast<const ClusterSpec*>(&gloo)}) {
    CAPTURE(cluster->backend);
    const auto e = estimate_layout(c, *cluster, l);
    const double S = e.parameters_per_rank * 4;
    // A flat ring of 8 crossing the nodes: 1 GB/s and 10 us a hop.
    auto pass = [](double bytes) { return 7.0 / 8.0 * bytes * 1e-9 + 7 * 1e-5; };
    // bf16: the chunks' exchange overlaps backward, the sums' all-gather does not.
    const auto bf16 = dp_variant_cost(c, *cluster, e, {loom::DpCollectives::flat, loom::GradCompression::bf16, 1});
    CHECK(bf16.unhidden_s == Approx(pass(S / 2)));
    CHECK(bf16.unhidden_s < bf16.seconds);
    // PowerSGD: the Ps (and vectors) overlap backward, the Qs' all-reduce does not. A GPT block of
    // hidden h has 12 h^2 + 13 h parameters; its four matrices' Qs are (h + h + h + 4h) r of them.
    const double h = 256, r = 4;
    const auto psgd = dp_variant_cost(c, *cluster, e, {loom::DpCollectives::flat, loom::GradCompression::powersgd, 4});
    CHECK(psgd.unhidden_s == Approx(2 * pass(S * 7 * h * r / (12 * h * h + 13 * h))));
    CHECK(psgd.unhidden_s < psgd.seconds);
    // Uncompressed, a flat ring has nothing after the wait.
    CHECK(dp_variant_cost(c, *cluster, e, {loom::DpCollectives::flat, loom::GradCompression::none, 1}).unhidden_s == 0);
  }
}

TEST_CASE(
    "ZeRO-1 under Muon all-reduces, gathers and broadcasts its matrices, where AdamW's reduce-scatters and gathers",
    "[plan]") {
  loom::Config c = loom::test::small_gpt_for_plan();
  const ClusterSpec cluster = loom::test::two_node_cluster();
  Layout l;
  l.dp = 8;  // 4 ranks on each of 2 nodes
  l.micro_batch = 4;
  l.zero_stage = 1;
  const auto adamw = estimate_layout(c, cluster, l);
  c.train.optimizer = loom::OptimizerKind::muon;
  const auto muon = estimate_layout(c, cluster, l);
  auto dp_wire = [](const LayoutEstimate& e) {
    for (const auto& t : e.traffic)
      if (t.group == "dp") return t.bytes;
    return -1.0;
  };
  const double S = adamw.parameters_per_rank * 4, share = 7.0 / 8.0;
  // The owners' broadcasts: Muon's share of the parameters, the blocks' matrices (12 h^2 of a
  // block's 12 h^2 + 13 h, beside the embeddings).
  const double f = muon_parameter_fraction(c);
  CHECK(f > 0.5);
  CHECK(f < 1);
  CHECK(dp_wire(adamw) == Approx(2 * share * S));
  CHECK(dp_wire(muon) == Approx((3 + f) * share * S));
  CHECK(muon.dp_s > adamw.dp_s);
  // The same in the dp variants: a flat ring crossing the nodes at 1 GB/s and 10 us a hop.
  auto pass = [](double bytes) { return 7.0 / 8.0 * bytes * 1e-9 + 7 * 1e-5; };
  const DpVariant flat{loom::DpCollectives::flat, loom::GradCompression::none, 1};
  // Each owner broadcasts each of its matrices: 4 of each of the 4 blocks, 16 calls for one pass.
  CHECK(dp_variant_cost(c, cluster, muon, flat).seconds == Approx(3 * pass(S) + pass(f * S) + 15 * 7 * 1e-5));
  // The experts' buckets are all-reduced whole under Muon as well, then gathered: 3 passes to 2.
  loom::Config moe = c;
  moe.model.moe.num_experts = 4;
  auto expert_wire = [&](loom::OptimizerKind optimizer) {
    moe.train.optimizer = optimizer;
    for (const auto& t : estimate_layout(moe, cluster, l).traffic)
      if (t.group == "expert-dp") return t.bytes;
    return -1.0;
  };
  REQUIRE(expert_wire(loom::OptimizerKind::adamw) > 0);
  CHECK(expert_wire(loom::OptimizerKind::muon) == Approx(1.5 * expert_wire(loom::OptimizerKind::adamw)));
  c.train.optimizer = loom::OptimizerKind::adamw;
  CHECK(dp_variant_cost(c, cluster, adamw, flat).seconds == Approx(2 * pass(S)));
  // Compressed, ZeRO-1 all-reduces the compressed buckets and gathers the fp32 parameters whole.
  const DpVariant psgd{loom::DpCollectives::flat, loom::GradCompression::powersgd, 4};
  Layout z0 = l;
  z0.zero_stage = 0;
  const auto e0 = estimate_layout(c, cluster, z0);
  CHECK(dp_variant_cost(c, cluster, adamw, psgd).seconds ==
        Approx(dp_variant_cost(c, cluster, e0, psgd).seconds + pass(S)));
}
