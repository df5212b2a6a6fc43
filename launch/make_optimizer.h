// The optimizer the config asks for (train.optimizer), built by the trainer over the parameters
// the gradient synchronisation owns. AdamW is sharded to match the synchronisation's ZeRO
// stage (optim/make_adamw.h). Muon takes the transformer blocks' 2-D weights and AdamW the rest (embeddings, the
// output layer, norms, biases, routers), one optimizer over the whole list for the step loop
// and the checkpoints.
#pragma once

#include <memory>

#include "core/config.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "parallel/gradient_sync.h"
#include "parallel/process_groups.h"

namespace loom::launch {

// GROUPS: tp, over which Muon gathers the weights split across it, and the world, over which
// train.muon.include / exclude patterns that match no parameter anywhere are refused (exit 2).
std::unique_ptr<optim::Optimizer> make_optimizer(const Config& config, parallel::GradientSync& sync,
                                                 parallel::ProcessGroups& groups);

// Whether Muon trains PARAM (core/muon_groups.h): the blocks' 2-D weights, routers excepted, and
// what CONFIG's train.muon.include / exclude say.
bool muon_parameter(const parallel::ParallelParameter& param, const MuonConfig& config = {});

// The logical matrices a Muon weight holds (CONFIG's heads): loom's fused attention weights
// keep q, k, v (or k, v) of each head together, and Muon orthogonalises each of them apart.
optim::MatrixSplit muon_split(const parallel::ParallelParameter& param, const Config& config);

}  // namespace loom::launch
