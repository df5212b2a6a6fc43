// Ranks that hold the same parameters must start from the same values. model.init_from is read by
// every rank from its own file system, so node-local copies that differ (an interrupted rsync,
// another revision of the model) would train data-parallel replicas that never agree, and nothing
// would say so: the losses look like any run's. After loading, every rank digests what it holds
// and the ranks compare: the replicas of data and context parallelism share their tp and pp
// coordinates, an expert's replicas their ep coordinate as well.
#pragma once

#include <string>
#include <vector>

#include "parallel/parallel_parameter.h"
#include "parallel/process_groups.h"

namespace loom::launch {

// Collective over the world (nothing at world 1). Throws InputError on every rank, naming two
// ranks whose weights differ and SOURCE (what they were read from), when any replicas disagree.
void agree_on_loaded_weights(const std::vector<parallel::ParallelParameter>& params, parallel::ProcessGroups& groups,
                             const std::string& source);

}  // namespace loom::launch
