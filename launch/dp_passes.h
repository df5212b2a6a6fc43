// What data parallelism puts on the wire in a step, by the calls loom's trainer issues
// (models/gpt_traffic.cpp counts the same calls one by one): the bytes a parameter takes there and
// how many ring passes each ZeRO stage makes of the gradients and the parameters. `loom plan`'s
// cost model (launch/layout_cost.h) and its data-parallel variants (launch/dp_variants.h) price them.
#pragma once

#include <cstdint>

#include "core/config.h"

namespace loom::launch {

// The share of the parameters in the transformer blocks (ZeRO 2 and 3 reduce, and 3 gathers,
// them micro-batch by micro-batch; the embeddings and the output once a step).
double block_parameter_fraction(const Config& config);

// Bytes one parameter puts on the data-parallel wire per pass, whatever train.precision keeps in
// memory: gradients are reduced as the fp32 masters' (bf16 under parallel.grad_reduce_dtype,
// stages 0 and 1 only); ZeRO-1 gathers its updated fp32 masters, ZeRO 2 and 3 gather the
// parameters in the model's dtype (models/gpt_traffic.cpp counts the same calls).
struct DpWireBytes {
  double grad = 4, param = 4;
};
DpWireBytes dp_wire_bytes(const Config& config, int64_t zero_stage);

// A dp group's ring passes in a step: a reduce-scatter or an all-gather of everything is one
// pass, an all-reduce two; of the gradients and of the parameters (fractions: the blocks' share,
// Muon's), in the collectives' calls that carry them, each paying P-1 latencies. REDUCTIONS
// (and their calls): how often each gradient is reduced, what HSDP's replicas all-reduce.
struct DpPasses {
  double grads = 0, params = 0, grad_calls = 0, param_calls = 0, reductions = 1, reduction_calls = 1;
};

// What the trainer issues over dp. Stages 0 and 1 reduce bucket by bucket once a step: stage 0
// all-reduces, 1 reduce-scatters and gathers the updated shards (under Muon, whose owners
// orthogonalise whole matrices, all-reduces, gathers, and each owner broadcasts its updated
// matrices: a pass of Muon's share). Stages 2 and 3 work unit by unit: a block's gradients are
// reduce-scattered after each micro-batch's backward (once a step under a split backward, zb-h1),
// the embeddings' and output's once a step; stage 2 gathers the updated parameters once, stage 3
// each block for every micro-batch's forward and again for its backward, the rest once; under
// Muon each block's gradient shards are gathered whole and the owners' updates reduce-scattered
// back. MICRO_BATCHES per step on a stage of PP; BLOCK_SHARE: block_parameter_fraction; BUCKETS
// of stages 0 and 1; MUON_SHARE: Muon's share of the parameters (0 without Muon).
DpPasses dp_passes(const Config& config, int64_t zero_stage, int64_t pp, int64_t micro_batches, double block_share,
                   double buckets, double muon_share);

// Bytes a rank sends for the passes over P ranks ((P-1)/P of each pass's bytes, GRADS and PARAMS
// being a whole pass's), and the seconds on a link of latency ALPHA and BETA s/byte.
double ring_passes_bytes(const DpPasses& passes, double grads, double params, int64_t p);
double ring_passes_time(const DpPasses& passes, double grads, double params, int64_t p, double alpha, double beta);

}  // namespace loom::launch
