// Before a rank builds anything: the memory `loom plan` estimates for this layout against what
// the machine has. A model that cannot fit (a hidden_size typed with three zeros too many) is
// refused at once, naming the keys that size it and both numbers, instead of ending minutes
// later in an allocator's error, in swap or in the kernel's OOM killer. The estimate is
// pessimistic where loom is frugal (it counts attention scores kept for backward), so
// train.memory_check: false trains anyway.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "core/config.h"

namespace loom::launch {

struct MemoryEstimate {
  double parameters = 0;        // the whole model's
  double rank_parameters = 0;   // those one rank holds
  double state_bytes = 0;       // one rank's parameters, gradients and optimizer state (ZeRO's accounting)
  double activation_bytes = 0;  // one rank's activations at a step's peak (Korthikanti et al.), logits included
  double rank_bytes() const { return state_bytes + activation_bytes; }
};

// Models above this many parameters are refused whatever train.memory_check says: loom's
// counts (int64 products of the sizes) are not made for them.
constexpr double kMaxParameters = 1e15;

// One rank's share under CONFIG's (validated) layout. Computed in doubles from the sizes, so
// that no size the config bounds can overflow it. SCORES_KEPT: attention keeps its S x S scores
// for backward (loom's CPU kernels); on a GPU without dropout SDPA keeps none.
MemoryEstimate estimate_rank_memory(const Config& config, bool scores_kept = true);

// Why RANKS ranks of ESTIMATE do not fit in AVAILABLE bytes (WHERE names them: "this machine's
// memory (MemTotal)"), or empty when they do.
std::string memory_refusal(const Config& config, const MemoryEstimate& estimate, int64_t ranks, double available,
                           const std::string& where);

// The memory of this machine (MemTotal, or the cgroup's limit when lower), in bytes; WHERE
// says which. -1 when neither can be read.
double machine_memory_bytes(std::string& where);

// Throws InputError (exit 2) with memory_refusal's message when this node's LOCAL_RANKS ranks
// cannot fit in its memory (each its GPU's, for cuda); a model above kMaxParameters always.
// Nothing when train.memory_check is false and the model is countable, or the memory cannot be read.
void check_memory_fits(const Config& config, const torch::Device& device, int64_t local_ranks);

}  // namespace loom::launch
