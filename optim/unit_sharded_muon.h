// Muon over ZeRO-2/3's units (parallel/fully_sharded.h), by layer-wise ownership: each weight
// is owned by one rank of the units' group, which needs its whole gradient while every rank
// holds a flat shard of it. A step, unit by unit: the gradient shards are all-gathered, each
// owner computes the updates of its weights (optim/muon.h), writes them into a zero buffer laid
// out like the unit, and a reduce-scatter (one non-zero term per element: exact) hands every
// rank its shard of the updates, which it applies with the decay to its parameter shard.
#pragma once

#include <vector>

#include "optim/muon.h"
#include "parallel/fully_sharded.h"

namespace loom::optim {

class UnitShardedMuon : public MuonOptimizer {
 public:
  // WEIGHTS: Muon's parameters among SHARDED's (indices into its parameter list), each a whole
  // logical matrix of SPLITS[k] (its tp part). GROUP: the units' group, whose ranks own them.
  UnitShardedMuon(parallel::FullyShardedParameters& sharded, parallel::Communicator& group, std::vector<size_t> weights,
                  std::vector<MatrixSplit> splits, MuonOptions options, MuonSharding sharding);
  void step(double lr) override;
  void zero_grad() override {}  // the units' gradients belong to the AdamW beside it

 private:
  parallel::FullyShardedParameters& sharded_;
  parallel::Communicator& group_;
  std::vector<size_t> weights_;
  // Per unit holding Muon weights: the unit, and its weights as (k, place in the unit).
  std::vector<std::pair<size_t, std::vector<std::pair<size_t, size_t>>>> by_unit_;
};

}  // namespace loom::optim
