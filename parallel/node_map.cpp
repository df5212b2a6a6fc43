#include "parallel/node_map.h"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>

namespace loom::parallel {

uint64_t host_hash(const std::string& name) {
  return std::hash<std::string>{}(name) & ((uint64_t{1} << 52) - 1);
}

std::vector<int64_t> assign_nodes(const std::vector<NodeHint>& hints, int64_t ranks_per_node) {
  const int64_t world = static_cast<int64_t>(hints.size());
  std::vector<int64_t> node(static_cast<size_t>(world), -1);
  if (ranks_per_node > 0) {
    for (int64_t r = 0; r < world; ++r) node[static_cast<size_t>(r)] = r / ranks_per_node;
    return node;
  }
  // Each host's ranks (ascending), then cut by that host's local world size.
  std::map<uint64_t, std::vector<int64_t>> by_host;
  for (int64_t r = 0; r < world; ++r) by_host[hints[static_cast<size_t>(r)].host].push_back(r);
  std::vector<std::vector<int64_t>> groups;
  for (const auto& [host, ranks] : by_host) {
    const int64_t size = std::max<int64_t>(1, hints[static_cast<size_t>(ranks.front())].local_world);
    for (size_t i = 0; i < ranks.size(); i += static_cast<size_t>(size)) {
      groups.emplace_back(ranks.begin() + static_cast<std::ptrdiff_t>(i),
                          ranks.begin() + static_cast<std::ptrdiff_t>(std::min(ranks.size(), i + size)));
    }
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  for (size_t n = 0; n < groups.size(); ++n)
    for (int64_t r : groups[n]) node[static_cast<size_t>(r)] = static_cast<int64_t>(n);
  return node;
}

std::vector<int64_t> discover_nodes(Communicator& world, const std::string& host, int64_t local_world,
                                    int64_t ranks_per_node) {
  const int64_t n = world.size();
  auto mine = torch::tensor({static_cast<double>(host_hash(host)), static_cast<double>(local_world)}, torch::kFloat64);
  auto all = torch::zeros({n, 2}, torch::kFloat64);
  if (n > 1) {
    world.all_gather(all, mine).wait();
  } else {
    all[0].copy_(mine);
  }
  std::vector<NodeHint> hints(static_cast<size_t>(n));
  auto a = all.accessor<double, 2>();
  for (int64_t r = 0; r < n; ++r)
    hints[static_cast<size_t>(r)] = {static_cast<uint64_t>(a[r][0]), static_cast<int64_t>(a[r][1])};
  return assign_nodes(hints, ranks_per_node);
}

std::vector<std::vector<int64_t>> node_members(const std::vector<int64_t>& node_of_rank) {
  std::vector<std::vector<int64_t>> out;
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    const auto n = static_cast<size_t>(node_of_rank[r]);
    if (out.size() <= n) out.resize(n + 1);
    out[n].push_back(static_cast<int64_t>(r));
  }
  return out;
}

}  // namespace loom::parallel
