// Which ranks share a node (parallel/node_map.h): parallel.ranks_per_node, host names, and hosts
// cut by the launcher's local world size (namespaces that share one host name).
#include <catch2/catch.hpp>

#include "parallel/node_map.h"

using loom::parallel::assign_nodes;
using loom::parallel::node_members;
using loom::parallel::NodeHint;
using Nodes = std::vector<int64_t>;

TEST_CASE("nodes: ranks_per_node, host names, and a host cut by its local world size", "[topology]") {
  // parallel.ranks_per_node wins: consecutive blocks, whatever the hosts say.
  const std::vector<NodeHint> one_host(6, NodeHint{7, 6});
  CHECK(assign_nodes(one_host, 2) == Nodes{0, 0, 1, 1, 2, 2});
  CHECK(assign_nodes(one_host, 0) == Nodes{0, 0, 0, 0, 0, 0});
  // Two hosts, ranks placed round-robin (Open MPI's --map-by node): by name, not by rank order.
  const std::vector<NodeHint> round_robin{{11, 2}, {22, 2}, {11, 2}, {22, 2}};
  CHECK(assign_nodes(round_robin, 0) == Nodes{0, 1, 0, 1});
  CHECK(node_members(assign_nodes(round_robin, 0)) == std::vector<Nodes>{{0, 2}, {1, 3}});
  // One host name, a local world of 2 (scripts/fabric.sh's namespaces): consecutive pairs.
  const std::vector<NodeHint> namespaces(4, NodeHint{5, 2});
  CHECK(assign_nodes(namespaces, 0) == Nodes{0, 0, 1, 1});
  // Nodes are numbered by their lowest rank, whatever the hashes' order.
  const std::vector<NodeHint> hashed{{99, 1}, {3, 1}};
  CHECK(assign_nodes(hashed, 0) == Nodes{0, 1});
  CHECK(loom::parallel::host_hash("a") < (uint64_t{1} << 52));
}
