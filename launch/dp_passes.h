// What data parallelism puts on the wire in a step, by the calls loom's trainer issues
// (models/gpt_traffic.cpp counts the same calls one by one): the bytes a parameter takes there and
// how many ring passes each ZeRO stage makes of the gradients and the parameters. `loom plan`'s
// cost model (launch/layout_cost.h) and its data-parallel variants (launch/dp_variants.h) price them.
#pragma once

#include <cstdint>
#include <functional>

#include "core/config.h"
#include "models/gpt_shapes.h"

namespace loom::launch {

// Bytes one parameter puts on the data-parallel wire per pass, whatever train.precision keeps in
// memory: gradients are reduced as the fp32 masters' (bf16 under parallel.grad_reduce_dtype,
// stages 0 and 1 only); ZeRO-1 gathers its updated fp32 masters, ZeRO 2 and 3 gather the
// parameters in the model's dtype.
struct DpWireBytes {
  double grad = 4, param = 4;
};
DpWireBytes dp_wire_bytes(const Config& config, int64_t zero_stage);

// What the passes depend on in the model at a layout, for the parameters a dp group reduces (the
// dense ones; an MoE's routed experts go over expert-dp, all of them in blocks). Shares are of
// those parameters, on the heavier end stage when pp > 1 (layout_cost.h's parameters_per_rank);
// counts are a pipeline stage's (the stages' mean).
struct DpModel {
  double block_share = 1;      // in the transformer blocks (ZeRO 2/3: a unit each); the rest is the root unit
  int64_t blocks = 1;          // blocks on a stage
  double buckets = 1;          // stages 0 and 1's gradient buckets on a stage (parallel/grad_buckets.h)
  double muon_share = 0;       // trained by Muon (train.optimizer: muon)
  double muon_weights = 0;     // Muon's weights on a stage: ZeRO-1's owners broadcast each
  double muon_unit_share = 0;  // in the units that hold a Muon weight: ZeRO 2/3's Muon moves them whole
  double muon_units = 0;       // those units on a stage
  bool split = false;          // a split backward (zb-h1): ZeRO 2/3 reduce each unit once a step
  double split_skipped = 0;    // and ZeRO-3 gathers a stage's lowest block this many times less
};

// The dense parameters' DpModel at tp TP and pp PP with MICRO_BATCHES a step.
DpModel dense_dp_model(const Config& config, int64_t tp, int64_t pp, int64_t micro_batches);

// What the heavier end pipeline stage holds beyond its pp-th of the blocks, each shape counted by
// COUNT: the first stage's embeddings, or the last stage's final norm, output layer, multi-token
// prediction modules and its own copy of the word embedding (when tied, or when those modules embed
// with it: models/gpt.cpp's tied_wte). (Config at its tp.)
double heavier_end_stage(const Config& config, const std::function<double(const models::ParameterShape&)>& count);

// The share of the dense parameters in the transformer blocks (ZeRO 2 and 3 reduce, and 3 gathers,
// them micro-batch by micro-batch; the embeddings, the output and multi-token prediction's
// modules, the root unit, once a step).
double block_parameter_fraction(const Config& config);

// A dp group's ring passes in a step: a reduce-scatter or an all-gather of everything is one
// pass, an all-reduce two; of the gradients and of the parameters (fractions: the blocks' share,
// Muon's), in the collectives' calls that carry them, each paying P-1 latencies. REDUCTIONS
// (and their calls): how often each gradient is reduced, what HSDP's replicas all-reduce.
// ALL_REDUCED: the gradients are all-reduced whole (stage 0, Muon's stage 1), not reduce-scattered.
struct DpPasses {
  double grads = 0, params = 0, grad_calls = 0, param_calls = 0, reductions = 1, reduction_calls = 1;
  bool all_reduced = false;
};

// What the trainer issues over dp. Stages 0 and 1 reduce bucket by bucket once a step: stage 0
// all-reduces, 1 reduce-scatters and gathers the updated shards (under Muon, whose owners
// orthogonalise whole matrices, all-reduces, gathers, and each owner broadcasts each of its
// updated matrices: a pass of Muon's share). Stages 2 and 3 work unit by unit: a block's
// gradients are reduce-scattered after each micro-batch's backward (once a step under a split
// backward, zb-h1), the root's once a step; stage 2 gathers the updated parameters once, stage 3
// each block for every micro-batch's forward and again for its backward (less what a split
// backward skips), the root once; under Muon each unit holding a Muon weight has its gradient
// shards gathered whole and the owners' updates reduce-scattered back. MICRO_BATCHES a step.
DpPasses dp_passes(const Config& config, int64_t zero_stage, int64_t micro_batches, const DpModel& model);

// Bytes a rank sends for the passes over P ranks ((P-1)/P of each pass's bytes, GRADS and PARAMS
// being a whole pass's), and the seconds on a link of latency ALPHA and BETA s/byte.
double ring_passes_bytes(const DpPasses& passes, double grads, double params, int64_t p);
double ring_passes_time(const DpPasses& passes, double grads, double params, int64_t p, double alpha, double beta);

}  // namespace loom::launch
