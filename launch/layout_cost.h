// The cost model behind `loom plan`: for a transformer, a cluster and a
// layout, the standard estimates of memory per GPU, traffic per step and
// group, collective times by the alpha-beta model, pipeline bubble, compute
// time, step time and MFU. Pure arithmetic; the formulas are those of
// shared/background (ZeRO's model-state accounting, Megatron-LM's
// activation memory and bubble, ring collectives) and each is a small
// function so that tests check it against worked figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "launch/dp_passes.h"
#include "parallel/cluster_spec.h"

namespace loom::launch {

using parallel::ClusterSpec;

// ---- the formulas -----------------------------------------------------------

// Bytes of model state per parameter and how ZeRO divides them over D ranks:
// stage 0 keeps all; 1 shards the optimizer state; 2 also the gradients; 3 also the parameters.
struct StateBytes {
  double param = 2, grad = 2, optimizer = 12;  // mixed-precision Adam: bf16 param and grad, fp32 master + m + v
};
double model_state_bytes(double parameters, int64_t zero_stage, int64_t dp, const StateBytes& b);
// What this version of loom holds per parameter, as its memory report measures it (and what a
// layout must fit): fp32 follows the textbook. Under mixed precision: 16-bit parameters, fp32
// gradients, fp32 master weights and the optimizer's MOMENT_BYTES (Adam's two: 8); stage 1 shards
// the moments, stage 2 the masters and gradients too, stage 3 everything (no 16-bit copy kept).
double loom_state_bytes(double parameters, int64_t zero_stage, int64_t dp, bool mixed, double moment_bytes = 8);

// Ring collectives over P ranks of N bytes on a link of latency ALPHA (s) and BETA (s/byte).
double ring_all_reduce_time(double n, int64_t p, double alpha, double beta);  // 2(P-1)/P n beta + 2(P-1) alpha
double ring_all_gather_time(double n, int64_t p, double alpha, double beta);  // (P-1)/P n beta + (P-1) alpha
double all_to_all_time(double n, int64_t p, double alpha, double beta);       // (P-1)/P n beta + (P-1) alpha
double point_to_point_time(double n, double alpha, double beta);              // alpha + n beta
// The message size at which latency and bandwidth cost the same: alpha / beta.
double crossover_bytes(double alpha, double beta);

// Tensor-parallel bytes a rank moves per layer and micro-batch: 4 all-reduces of B*S*H (2 forward, 2 backward).
double tp_layer_volume_elements(int64_t b, int64_t s, int64_t h, int64_t t);  // 4 * 2(T-1)/T * B*S*H
double pipeline_bubble(int64_t p, int64_t m, int64_t v);                      // (p-1)/(m v + p-1)

// Activation bytes of one transformer layer for one micro-batch (Korthikanti et al. 2022, 16-bit):
// S B H (C + 5 a S / H) / t with tp t and sequence parallelism, C = layer_activation_coefficient
// (34 for GPT); selective recomputation drops the 5 a S / H term; full recomputation keeps only
// the layer input, 2 S B H / t.
double layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t heads, int64_t t, Recompute recompute,
                              double coefficient);

// C above, counted as Korthikanti et al. count GPT's 34 (in units of S B H, 2 bytes each element):
// the two norms' inputs 4; attention 11 (its input, Q, K and V, the projection's input, the
// dropout mask), GQA's too, since loom expands K and V to every query head before the core
// (models/self_attention.cpp); the MLP's input and dropout mask 3, plus 4 F / H for GELU (its
// input and output) or 6 F / H for SwiGLU (gate and up, which models/swiglu keeps for backward,
// and their product, the projection's input).
double layer_activation_coefficient(const Config& config);

// Parameters one rank holds at tp and pp (with sequence parallelism): the model divided by tp,
// except what tp replicates (norms, row biases, key/value projections shared by tp / kv_heads
// ranks); at pp > 1 a pp-th of the blocks plus the heavier end's own: the first stage's
// embeddings, or the last stage's final norm, output layer, multi-token prediction modules and a
// copy of the word embedding (when tied, or when those modules embed).
double parameters_per_rank(const Config& config, int64_t tp, int64_t pp);

// The share of the parameters Muon trains (train.optimizer: muon): the blocks' 2-D weights.
// Their optimizer state is one fp32 momentum, AdamW's two moments for the rest.
double muon_parameter_fraction(const Config& config);

// ---- a layout, estimated ------------------------------------------------------

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, virtual_stages = 1, zero_stage = 0, micro_batch = 1;
  Recompute recompute = Recompute::none;
  // Context parallelism: each sequence split over CP ranks (ring attention, or all-to-all).
  int64_t cp = 1;
  ContextComm cp_comm = ContextComm::p2p;
  // HSDP (parallel.dp_shard): ZeRO shards over dp_shard dp ranks (times cp) and replicates across; 0: all of dp.
  int64_t dp_shard = 0;
  // A mixture of experts' expert parallelism: each rank holds num_experts / ep of each MoE block's
  // routed experts, whose gradients average over the dp / ep ranks (times cp) holding the same ones.
  int64_t ep = 1;
  int64_t world() const { return tp * cp * pp * dp; }
  int64_t shard_ranks() const { return (dp_shard > 0 && dp_shard < dp ? dp_shard : dp) * cp; }
};

struct GroupTraffic {
  std::string group, link;  // link: "intra-node" or "inter-node"
  double bytes = 0;         // per rank and step, on the wire
  double seconds = 0;
};

struct LayoutEstimate {
  Layout layout;
  double parameters_per_rank = 0;
  double expert_parameters_per_rank = 0;  // of parameters_per_rank, the routed experts' (sharded over expert-dp x cp)
  double state_bytes = 0, activation_bytes = 0, memory_bytes = 0;
  std::vector<GroupTraffic> traffic;
  double compute_s = 0, bubble = 0, exposed_comm_s = 0, step_s = 0, mfu = 0;
  double dp_s = 0;     // the flat, uncompressed dp reduction (launch/dp_variants.h weighs the others)
  DpPasses dp_passes;  // the dense parameters' passes behind dp_s (the experts' follow the same rules)
  // Of dp_s, what backward cannot hide: over NCCL, HSDP's all-reduce across the replicas, which each
  // reduction issues only once its shard step is waited for (after backward, or inside ZeRO-2/3's);
  // over Gloo nothing (a thread of its own issues it at once: ClusterSpec::backend). The two-level
  // collectives' later steps, likewise, are weighed by launch/dp_variants.h (DpVariantCost::unhidden_s).
  double dp_unhidden_s = 0;
  bool fits = true;
  bool tp_across_nodes = false;
  std::string reason;   // the kind of loss: "out of memory", "tp across nodes", "pipeline bubble", "slower"
  std::string verdict;  // why it loses, in plain words; empty for the best
};

LayoutEstimate estimate_layout(const Config& config, const ClusterSpec& cluster, const Layout& layout);

// A cluster for estimates whose memory and parameter counts alone are read: unbounded memory, and
// links and a peak that keep the rest of the arithmetic finite.
ClusterSpec memory_only_cluster();

// Whether GROUP reduces gradients over data parallelism (dp, dp-cp, HSDP's dp-shard and dp-replicate,
// expert-dp, expert-dp-cp): hidden behind backward in part, not on the critical path.
bool is_gradient_group(const std::string& group);

// The part of a dp reduction of DP_S seconds that shows in the step: backward hides up to two thirds
// of COMPUTE_S of it, except UNHIDDEN_S (HSDP's step across the replicas), which always shows.
double exposed_dp_seconds(double dp_s, double unhidden_s, double compute_s);

// CONFIG's own layout (its parallel keys, resolved: dp given; micro-batch and recomputation).
Layout layout_of(const Config& config);

// The bytes of every group's traffic per step, summed (rounded to a byte).
int64_t total_traffic_bytes(const LayoutEstimate& estimate);

constexpr int64_t kLongSequence = 8192;

// Context parallelism's bytes per rank for one layer and micro-batch (forward and backward): the
// ring sends this rank's key/value shard (2 B S/cp kv_heads d / t elements) on cp - 1 times in
// forward and twice that in backward (keys and values again, then their gradients), plus another
// forward's worth under recomputation; all-to-all re-splits q, k, v and the context from sequence to
// heads and back, (cp-1)/cp of each, forward and backward.
double cp_layer_volume_elements(const Config& config, const Layout& layout);

// Every valid layout of CONFIG's model on WORLD GPUs, estimated, best (fitting, fastest) first;
// at the same step time, less traffic and then less memory first.
// Context parallelism is considered (cp 2, 4, 8, 16 in both modes) for sequences of
// kLongSequence tokens and more, where attention's activations outgrow a rank.
std::vector<LayoutEstimate> enumerate_layouts(const Config& config, const ClusterSpec& cluster, int64_t world);

}  // namespace loom::launch
