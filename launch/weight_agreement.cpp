#include "launch/weight_agreement.h"

#include <map>
#include <tuple>

#include "core/crc32c.h"
#include "core/errors.h"

namespace loom::launch {
namespace {

// CRC-32C of the bytes of PARAMS whose `expert` flag is EXPERTS, in order (the model's own, the
// same on every replica).
int64_t digest_of(const std::vector<parallel::ParallelParameter>& params, bool experts) {
  uint32_t crc = 0;
  for (const auto& p : params) {
    if (p.expert != experts) continue;
    const auto t = p.tensor.detach().to(torch::kCPU).contiguous();
    crc = crc32c(t.data_ptr(), t.nbytes(), crc);
  }
  return static_cast<int64_t>(crc);
}

// The exchange of load_on_every_rank; LOADED_HERE: whether this rank's load succeeded.
std::string compare_loaded_weights(const std::vector<parallel::ParallelParameter>& params,
                                   parallel::ProcessGroups& groups, const std::string& source, bool loaded_here) {
  const int64_t world = groups.world();
  if (world == 1) return "";
  // Without replicas (dp x cp of 1) there is nothing to compare: only whether every rank loaded.
  const auto& sizes = groups.grid().sizes();
  const bool replicas = sizes.dp * sizes.cp > 1;
  auto mine = torch::tensor({loaded_here && replicas ? digest_of(params, false) : 0,
                             loaded_here && replicas ? digest_of(params, true) : 0, int64_t{loaded_here ? 1 : 0}},
                            torch::kInt64);
  auto all = torch::zeros({world, 3}, torch::kInt64);
  groups.world_comm().all_gather(all, mine).wait();
  for (int64_t r = 0; r < world; ++r) {
    if (all[r][2].item<int64_t>() == 1 || !loaded_here) continue;
    throw InputError("model.init_from: rank " + std::to_string(r) + " could not load '" + source +
                     "' (its own message says why)");
  }
  if (!loaded_here) return "";
  // Every rank sees every digest and reaches the same verdict: the first rank (in rank order)
  // whose digest differs from the lowest rank holding the same parameters.
  const auto& grid = groups.grid();
  std::map<std::tuple<int64_t, int64_t>, int64_t> dense_holder;
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> expert_holder;
  for (int64_t r = 0; r < world; ++r) {
    const auto c = grid.coords(r);
    const int64_t dense = dense_holder.try_emplace({c.tp, c.pp}, r).first->second;
    const int64_t expert = expert_holder.try_emplace({c.tp, c.pp, c.ep}, r).first->second;
    const bool dense_differs = all[r][0].item<int64_t>() != all[dense][0].item<int64_t>();
    const bool experts_differ = all[r][1].item<int64_t>() != all[expert][1].item<int64_t>();
    if (!dense_differs && !experts_differ) continue;
    const int64_t first = dense_differs ? dense : expert;
    return "model.init_from: ranks " + std::to_string(first) + " and " + std::to_string(r) + " read different " +
           (dense_differs ? "weights" : "expert weights") + " from '" + source +
           "', where they hold the same parameters (data- or context-parallel replicas) and must start alike: "
           "every node must see the same files (a copy on a node's local disk that differs, e.g. an interrupted "
           "copy or another revision of the model)";
  }
  return "";
}

}  // namespace

std::string load_on_every_rank(const std::vector<parallel::ParallelParameter>& params, parallel::ProcessGroups& groups,
                               const std::string& source, const std::function<void()>& load) {
  std::exception_ptr failure;
  try {
    load();
  } catch (...) {
    failure = std::current_exception();
  }
  auto verdict = compare_loaded_weights(params, groups, source, !failure);
  if (failure) std::rethrow_exception(failure);
  return verdict;
}

}  // namespace loom::launch
