#include "launch/dp_variants.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/gpt_shapes.h"

namespace loom::launch {
namespace {

// PowerSGD's bytes over the uncompressed ones, from one block's shapes at tp T (every block has
// them; the embedding and output layer are matrices of the same kind): (n + m) r for each n x m
// matrix (its first dimension by the rest), the whole for a vector. `q` is the share of it that
// is the Qs (m r each), all-reduced after the Ps.
struct PowerSgdShare {
  double all = 1.0, q = 0.0;
};

PowerSgdShare powersgd_share(const Config& config, int64_t tp, int64_t rank) {
  Config c = config;
  c.parallel.tp = tp;
  double sent = 0, q_sent = 0, whole = 0;
  for (const auto& p : models::gpt_block_parameters(c, 0)) {
    const auto local = static_cast<double>(p.local_numel(tp));
    whole += local;
    if (p.shape.size() < 2) {
      sent += local;
      continue;
    }
    double n = static_cast<double>(p.shape.front());
    if (p.tp_split_dim == 0) n = std::ceil(n / static_cast<double>(tp));
    const double m = local / n, r = std::min({static_cast<double>(rank), n, m});
    sent += (n + m) * r;
    q_sent += m * r;
  }
  if (whole <= 0) return {};
  return {sent / whole, q_sent / whole};
}

}  // namespace

DpVariantCost dp_variant_cost(const Config& config, const parallel::ClusterSpec& cluster,
                              const LayoutEstimate& estimate, const DpVariant& variant) {
  const auto& l = estimate.layout;
  DpVariantCost c;
  c.variant = variant;
  c.ranks = l.dp * l.cp;
  // The gradient group's ranks sit tp apart (tp fastest): a node of G GPUs holds G / tp of them.
  c.per_node = std::clamp<int64_t>(cluster.gpus_per_node / std::max<int64_t>(l.tp, 1), 1, c.ranks);
  if (c.ranks % c.per_node != 0) c.per_node = 1;
  c.nodes = c.ranks / c.per_node;
  c.allowed = variant.compression == GradCompression::none || l.zero_stage <= 1;
  if (variant.hsdp) {
    // The shard group: the node's L ranks of the group (dp_shard dp ranks times cp), ZeRO 1-3,
    // uncompressed, several nodes, and the larger shards of state must fit.
    c.dp_shard = c.per_node % l.cp == 0 ? c.per_node / l.cp : 0;
    Layout sharded = l;
    sharded.dp_shard = c.dp_shard;
    c.allowed = variant.compression == GradCompression::none && variant.collectives == DpCollectives::flat &&
                l.zero_stage >= 1 && c.per_node > 1 && c.nodes > 1 && c.dp_shard > 0 && c.dp_shard < l.dp &&
                estimate_layout(config, cluster, sharded).fits;
  }
  // The gradients on the wire (fp32 masters') and the gathered parameters (launch/layout_cost.h).
  const DpWireBytes wire = dp_wire_bytes(config, l.zero_stage);
  const double grads = estimate.parameters_per_rank * wire.grad, params = estimate.parameters_per_rank * wire.param;
  const auto psgd = variant.compression == GradCompression::powersgd
                        ? powersgd_share(config, l.tp, variant.powersgd_rank)
                        : PowerSgdShare{};
  double payload = grads;
  switch (variant.compression) {
    case GradCompression::none: break;
    case GradCompression::bf16: payload = grads / 2.0; break;
    case GradCompression::int8: payload = grads / 4.0 * (1.0 + 4.0 / 256.0); break;
    case GradCompression::powersgd: payload = grads * psgd.all; break;
  }
  c.payload_bytes = payload;
  // The layout's passes (launch/layout_cost.h's DpPasses): the gradients' as the payload, the
  // parameters' gathers uncompressed (Muon's owners' broadcasts among them).
  const DpPasses& passes = estimate.dp_passes;
  const double q = static_cast<double>(c.ranks), L = static_cast<double>(c.per_node), N = static_cast<double>(c.nodes);
  const double ai = cluster.intra_latency, bi = 1.0 / cluster.intra_bandwidth;
  const double ax = cluster.inter_latency, bx = 1.0 / cluster.inter_bandwidth;
  if (c.ranks <= 1) return c;
  const bool across = c.nodes > 1;
  const bool two_level = variant.collectives == DpCollectives::hierarchical && across && c.per_node > 1;
  // A flat ring sends one flow per group out of each node; a shared NIC (inter_node_nic: shared)
  // gives it the link of the node's G / L groups' flows, L times a GPU's share. Two levels, and an
  // all-to-all, send from every rank at once: a GPU's share each.
  const double a = across ? ax : ai, b_ring = across ? (cluster.inter_nic_shared ? bx / L : bx) : bi;
  const double b_all = across ? bx : bi;
  // Ring passes of BYTES in all, over CALLS collectives: over the whole group, or the two levels'
  // (inside, then each rank's 1/L across).
  auto pass_time = [&](double bytes, double calls) {
    if (!two_level) return (q - 1) / q * bytes * b_ring + calls * (q - 1) * a;
    return (L - 1) / L * bytes * bi + (N - 1) / N * bytes / L * bx + calls * ((L - 1) * ai + (N - 1) * ax);
  };
  auto add_pass_bytes = [&](double bytes) {
    if (!two_level) {
      const double sent = (q - 1) / q * bytes;
      const double crossing = across ? sent * N / q : 0.0;  // N of the ring's Q links cross nodes
      c.inter_bytes += crossing;
      c.intra_bytes += sent - crossing;
      return;
    }
    c.intra_bytes += (L - 1) / L * bytes;
    c.inter_bytes += (N - 1) / N * bytes / L;
  };
  // What backward cannot hide (layout_cost.h's dp_unhidden_s): over NCCL a composite reduction's
  // later steps start when the trainer waits for it (parallel/later_steps.h), HSDP's across the
  // replicas and the two levels' after the node's reduce-scatter; over Gloo a thread issues them.
  const bool later_at_wait = !cluster.later_steps_overlap_backward();
  double unhidden = 0;
  if (variant.hsdp) {
    // ZeRO's passes inside the node, and each rank's 1/L share of each reduction all-reduced across
    // the nodes (every rank of a node at once: a GPU's share of the link each).
    const double inside = passes.grads * payload + passes.params * params;
    const double across_nodes =
        passes.reductions * 2.0 * (N - 1) / N * payload / L * bx + passes.reduction_calls * 2.0 * (N - 1) * ax;
    c.seconds = (L - 1) / L * inside * bi + (passes.grad_calls + passes.param_calls) * (L - 1) * ai + across_nodes;
    if (later_at_wait) unhidden = across_nodes;
    c.intra_bytes = (L - 1) / L * inside;
    c.inter_bytes = passes.reductions * 2.0 * (N - 1) / N * payload / L;
  } else {
    // ZeRO 1-3's gathers of the updated parameters, uncompressed.
    c.seconds = pass_time(passes.params * params, passes.param_calls);
    add_pass_bytes(passes.params * params);
    if (variant.compression == GradCompression::bf16 || variant.compression == GradCompression::int8) {
      // The chunks all-to-all (flat, whatever dp_collectives says), then the sums all-gathered.
      c.seconds += all_to_all_time(payload, c.ranks, a, b_all) + pass_time(payload, 1);
      // The gather is issued when the step waits for the bucket (parallel/grad_compression.cpp), on
      // either backend: only the exchange can overlap backward.
      unhidden = pass_time(payload, 1);
      c.intra_bytes += (L - 1) / q * payload;
      c.inter_bytes += (q - L) / q * payload;
      add_pass_bytes(payload);
    } else {
      // The gradients: all-reduced (two passes) at ZeRO-0, under PowerSGD, and at ZeRO-1 under
      // Muon; else reduce-scattered into the shards, at ZeRO 2 and 3 micro-batch by micro-batch.
      const bool powersgd = variant.compression == GradCompression::powersgd;
      const bool all_reduced = passes.all_reduced || powersgd;
      const double grad_passes = powersgd ? 2.0 : passes.grads;
      c.seconds += pass_time(grad_passes * payload, powersgd ? 2.0 * passes.reduction_calls : passes.grad_calls);
      add_pass_bytes(grad_passes * payload);
      if (two_level && later_at_wait && variant.compression == GradCompression::none) {
        // The gradients' reduction starts inside the node; what follows waits for the wait: the
        // all-reduce's every later step, or the reduce-scatter's step across the nodes (the
        // parameters' gathers are waited for at once anyway).
        const double first = (L - 1) / L * payload * bi + (L - 1) * ai;
        unhidden = all_reduced
                       ? pass_time(payload, 1) * 2 - first
                       : passes.reductions * (N - 1) / N * payload / L * bx + passes.reduction_calls * (N - 1) * ax;
      }
    }
  }
  // PowerSGD's second all-reduce (Q after P) pays the latencies twice. It is issued when the step
  // waits for the bucket (after the Ps are orthogonalised), on either backend: backward hides only
  // the Ps and vectors.
  if (variant.compression == GradCompression::powersgd) {
    c.seconds += 2.0 * passes.reduction_calls * (q - 1) * (c.nodes > 1 ? ax : ai);
    unhidden = pass_time(2.0 * grads * psgd.q, 2.0 * passes.reduction_calls);
  }
  // The step: the estimate's exposed reduction swapped for this one's (backward hides 2/3 of compute).
  c.unhidden_s = unhidden;
  c.step_s = estimate.step_s - exposed_dp_seconds(estimate.dp_s, estimate.dp_unhidden_s, estimate.compute_s) +
             exposed_dp_seconds(c.seconds, unhidden, estimate.compute_s);
  return c;
}

std::vector<DpVariantCost> dp_variants(const Config& config, const parallel::ClusterSpec& cluster,
                                       const LayoutEstimate& estimate) {
  std::vector<DpVariantCost> all;
  for (auto collectives : {DpCollectives::flat, DpCollectives::hierarchical}) {
    for (auto compression :
         {GradCompression::none, GradCompression::bf16, GradCompression::int8, GradCompression::powersgd}) {
      auto c = dp_variant_cost(config, cluster, estimate, {collectives, compression, config.parallel.powersgd.rank});
      if (c.allowed) all.push_back(c);
    }
  }
  auto hsdp = dp_variant_cost(config, cluster, estimate, {DpCollectives::flat, GradCompression::none, 1, true});
  if (hsdp.allowed) all.push_back(hsdp);
  // The same step (a reduction hidden behind backward): the faster reduction first.
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.step_s != b.step_s ? a.step_s < b.step_s : a.seconds < b.seconds;
  });
  return all;
}

void print_dp_variants(const Config& config, const parallel::ClusterSpec& cluster, const LayoutEstimate& estimate,
                       const std::string& which) {
  const auto all = dp_variants(config, cluster, estimate);
  if (all.empty() || all.front().ranks <= 1) return;
  const auto& first = all.front();
  double flat_step = 0;
  for (const auto& c : all) {
    if (c.variant.collectives == DpCollectives::flat && c.variant.compression == GradCompression::none &&
        !c.variant.hsdp)
      flat_step = c.step_s;
  }
  std::printf(
      "data-parallel reduction of %s, each way (a group of %lld ranks, %lld on each of %lld nodes; "
      "%.3g GB of gradients per rank and step; PowerSGD at rank %lld):\n",
      which.c_str(), static_cast<long long>(first.ranks), static_cast<long long>(first.per_node),
      static_cast<long long>(first.nodes), dp_variant_cost(config, cluster, estimate, {}).payload_bytes / 1e9,
      static_cast<long long>(config.parallel.powersgd.rank));
  std::printf("  %-13s %-11s %14s %14s %12s %10s %9s\n", "dp_collectives", "compression", "intra MB/rank",
              "inter MB/rank", "reduction s", "step s", "vs flat");
  // HSDP's row names its dp_shard in the collectives' column.
  auto collectives = [](const DpVariantCost& c) {
    return c.variant.hsdp ? "hsdp (" + std::to_string(c.dp_shard) + ")" : to_string(c.variant.collectives);
  };
  for (const auto& c : all) {
    std::printf("  %-13s %-11s %14.2f %14.2f %12.4f %10.4f %8.2fx\n", collectives(c).c_str(),
                to_string(c.variant.compression).c_str(), c.intra_bytes / 1e6, c.inter_bytes / 1e6, c.seconds, c.step_s,
                flat_step / c.step_s);
  }
  bool later_unhidden = false, compressed_unhidden = false;
  for (const auto& c : all) {
    const bool compressed = c.variant.compression != GradCompression::none;
    (compressed ? compressed_unhidden : later_unhidden) |= c.unhidden_s > 0;
  }
  if (compressed_unhidden) {
    std::printf(
        "  (compressed: bf16's and int8's all-gather and PowerSGD's all-reduce of Q start when the step waits for "
        "the reduction, on either backend, so step s counts them whole)\n");
  }
  if (later_unhidden) {
    std::printf(
        "  (backend %s: HSDP's step across the replicas and the two levels' steps after the node's "
        "reduce-scatter start when the step waits for them, so step s counts them whole)\n",
        cluster.backend.c_str());
  }
  if (first.variant.hsdp) {
    std::printf(
        "  fastest: HSDP, parallel.dp_shard %lld (ZeRO's state sharded inside each node, replicated across), %.2fx "
        "the flat uncompressed step\n",
        static_cast<long long>(first.dp_shard), flat_step / first.step_s);
    return;
  }
  std::printf(
      "  fastest: dp_collectives %s with grad_compression %s, %.2fx the flat uncompressed step (compression "
      "changes the gradients: bf16 and int8 round them, PowerSGD keeps rank %lld of each matrix; error feedback "
      "carries what is lost to the next step)\n",
      to_string(first.variant.collectives).c_str(), to_string(first.variant.compression).c_str(),
      flat_step / first.step_s, static_cast<long long>(config.parallel.powersgd.rank));
}

}  // namespace loom::launch
