// What a layout's data-parallel gradient reduction costs on a two-level cluster, done each way
// loom can do it: a flat ring or hierarchical (parallel.dp_collectives), uncompressed or
// compressed (parallel.grad_compression), by the background pages' formulas (003, 3.6, 7.5,
// 8.5-8.6). A dp group of Q ranks with L on each of N nodes (Q = N L):
//   flat ring all-reduce of S bytes: 2(Q-1)/Q S per rank, N of the ring's Q links cross nodes, so
//     it runs at the inter-node link's speed whenever N > 1;
//   hierarchical: reduce-scatter and all-gather inside the node (2(L-1)/L S on the fast link)
//     and an all-reduce of S/L across nodes (2(N-1)/N S/L on the slow one);
//   compressed: S becomes S/2 (bf16), S/4 plus one fp32 scale per 256 values (int8, over an
//     all-to-all and an all-gather), or (n + m) r per n x m matrix plus the vectors (PowerSGD, two
//     all-reduces);
//   HSDP (parallel.dp_shard = the node's L ranks of the group, ZeRO 1-3): ZeRO's passes inside
//     the node ((L-1)/L S each: reduce-scatter and all-gather, as launch/dp_passes.h counts them) and one
//     all-reduce of S/L across nodes (2(N-1)/N S/L); its state is sharded over L ranks, not Q, so
//     it is offered only where that fits in memory.
// `loom plan --cluster` prints them for the best layout and says which is fastest.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "launch/layout_cost.h"
#include "parallel/cluster_spec.h"

namespace loom::launch {

struct DpVariant {
  DpCollectives collectives = DpCollectives::flat;
  GradCompression compression = GradCompression::none;
  int64_t powersgd_rank = 1;
  bool hsdp = false;  // parallel.dp_shard: ZeRO's shard group is the node's ranks of the gradient group
};

struct DpVariantCost {
  DpVariant variant;
  int64_t ranks = 1, per_node = 1, nodes = 1;  // the gradient group: Q ranks, L on each of N nodes
  double payload_bytes = 0;                    // what one rank reduces per step, after compression
  double intra_bytes = 0, inter_bytes = 0;     // what one rank sends per step on each link
  double seconds = 0;                          // the reduction
  double unhidden_s = 0;                       // of it, what backward cannot hide (layout_cost.h's dp_unhidden_s)
  double step_s = 0;                           // the layout's step with it (past what backward hides)
  bool allowed = true;                         // compression needs zero_stage 0 or 1; HSDP 1-3, nodes, memory
  int64_t dp_shard = 0;                        // HSDP: parallel.dp_shard (dp ranks of a shard group)
};

DpVariantCost dp_variant_cost(const Config& config, const parallel::ClusterSpec& cluster,
                              const LayoutEstimate& estimate, const DpVariant& variant);

// Every variant allowed at ESTIMATE's ZeRO stage (PowerSGD at CONFIG's parallel.powersgd.rank),
// fastest step first (then fastest reduction).
std::vector<DpVariantCost> dp_variants(const Config& config, const parallel::ClusterSpec& cluster,
                                       const LayoutEstimate& estimate);

// The table `loom plan --cluster` prints under the layouts, for the layout WHICH names.
void print_dp_variants(const Config& config, const parallel::ClusterSpec& cluster, const LayoutEstimate& estimate,
                       const std::string& which);

}  // namespace loom::launch
