// Ranks that hold the same parameters must start from the same values. model.init_from is read by
// every rank from its own file system, so node-local copies that differ (an interrupted rsync,
// another revision of the model) would train data-parallel replicas that never agree, and nothing
// would say so: the losses look like any run's. After loading, every rank digests what it holds
// and the ranks compare: the replicas of data and context parallelism share their tp and pp
// coordinates, an expert's replicas their ep coordinate as well. The same exchange tells every
// rank whether each one could load at all: a rank that could not must not leave the others
// waiting in their next collective until parallel.timeout_s.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/parallel_parameter.h"
#include "parallel/process_groups.h"

namespace loom::launch {

// Collective over the world (nothing at world 1): LOAD (SOURCE into PARAMS), then the exchange on
// every rank, whether or not LOAD threw. A rank whose LOAD threw rethrows its own error; every
// other rank throws InputError naming the first such rank. Else returns, alike on every rank, why
// two replicas' weights differ (naming them and SOURCE), or nothing when they agree: the trainer
// refuses with it unless a checkpoint replaces the weights.
std::string load_on_every_rank(const std::vector<parallel::ParallelParameter>& params, parallel::ProcessGroups& groups,
                               const std::string& source, const std::function<void()>& load);

}  // namespace loom::launch
