// The process groups of a multi-rank Catch2 test binary, launched by mpirun or torchrun.
#pragma once

#include <functional>
#include <memory>

#include "parallel/gloo_communicator.h"
#include "parallel/launch_env.h"
#include "parallel/process_groups.h"

namespace loom::test {

struct MultiRankWorld {
  // TP_OF_WORLD picks the tp size for the world size; the rest of the ranks are dp.
  explicit MultiRankWorld(const std::function<int64_t(int64_t)>& tp_of_world)
      : grid_sizes{tp_of_world(env.world()), 1, env.world() / tp_of_world(env.world()), 1} {}

  parallel::LaunchEnv env{std::chrono::seconds(60)};
  std::shared_ptr<parallel::CommStats> stats = std::make_shared<parallel::CommStats>();
  parallel::ParallelSizes grid_sizes;
  parallel::RankGrid grid{grid_sizes};
  parallel::ProcessGroups groups{
      grid, env.rank(), parallel::make_gloo_factory(env.store(), env.single_host(), stats, std::chrono::seconds(60)),
      stats};
};

}  // namespace loom::test
