// Layer-wise ownership (Megatron-LM's distributed Muon): an optimizer that needs each weight whole
// (Muon's orthogonalisation) gives every weight to one rank of the data-parallel group, which
// updates it and sends it to the others, instead of cutting weights into flat ZeRO shards. The
// weights are dealt out by the work they cost, so every rank does about the same.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::parallel {

// The Newton-Schulz work of one step on a ROWS x COLS weight that holds PARTS matrices stacked
// along its rows (fused q, k, v: 3), each orthogonalised apart: parts x small^2 x large.
double newton_schulz_cost(int64_t rows, int64_t cols, int64_t parts);

// Owners for weights of COSTS among RANKS: the most costly first, each to the least loaded rank
// (lowest rank on ties), so every rank computes the same answer from the same list.
std::vector<int64_t> balance_owners(const std::vector<double>& costs, int64_t ranks);

}  // namespace loom::parallel
