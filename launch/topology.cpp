// loom topology: every process group of a layout as JSON, without launching anything.
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "launch/commands.h"
#include "parallel/node_map.h"
#include "parallel/rank_grid.h"

namespace loom::launch {

int topology(const TopologyArgs& args) {
  Config config = load_config(args.config_path, args.overrides);
  resolve_and_validate(config, args.world);
  const auto& p = config.parallel;
  parallel::RankGrid grid({p.tp, p.pp, p.dp, p.ep, p.cp, p.dp_shard}, p.order);
  grid.require_even_hsdp();  // an uneven HSDP cut of an expert-dp group: exit 2 naming parallel.dp_shard

  nlohmann::ordered_json out;
  out["world"] = args.world;
  out["order"] = p.order;
  out["sizes"] = {{"tp", p.tp}, {"cp", p.cp}, {"pp", p.pp}, {"dp", p.dp}, {"ep", p.ep}, {"expert-dp", p.dp / p.ep}};
  if (grid.hsdp()) out["sizes"]["dp-shard"] = p.dp_shard;
  for (auto kind : parallel::kAllGroupKinds) {
    auto groups = grid.groups(kind);
    if (!groups.empty()) out["groups"][parallel::group_kind_name(kind)] = std::move(groups);  // HSDP's only with it
  }
  // Nothing is launched, so no host names: consecutive blocks of parallel.ranks_per_node, else one node.
  const std::vector<parallel::NodeHint> hints(static_cast<size_t>(args.world), parallel::NodeHint{0, args.world});
  out["nodes"] = parallel::node_members(parallel::assign_nodes(hints, p.ranks_per_node));
  for (int64_t rank = 0; rank < args.world; ++rank) {
    const auto c = grid.coords(rank);
    out["ranks"].push_back({{"rank", rank},
                            {"tp", c.tp},
                            {"cp", c.cp},
                            {"pp", c.pp},
                            {"dp", c.dp},
                            {"ep", c.ep},
                            {"expert-dp", c.expert_dp}});
  }
  std::cout << out.dump(2) << std::endl;
  return 0;
}

}  // namespace loom::launch
