// Which ranks share a node. A fabric's fast links are inside a node and its slow ones between
// nodes, so traffic is split by it (the traffic report's sent_intra_node / sent_inter_node) and
// `loom topology` lists each node's ranks.
//
// A node is, in order of precedence: RANKS_PER_NODE consecutive ranks (parallel.ranks_per_node);
// else the ranks on one host (by name), cut into consecutive groups of the launcher's local world
// size where a host holds more ranks than that (network namespaces that share the host's name,
// each rank given its node's LOCAL_WORLD_SIZE by whatever starts it). Nodes are numbered in the
// order of their lowest rank. Under mpirun on one machine every rank reports the whole world as
// its local world (parallel/launch_env.cpp): there only parallel.ranks_per_node makes nodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace loom::parallel {

struct NodeHint {
  uint64_t host = 0;        // the host name's hash
  int64_t local_world = 1;  // the launcher's local world size (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE, ...)
};

// The node of each rank, from every rank's HINTS (by rank).
std::vector<int64_t> assign_nodes(const std::vector<NodeHint>& hints, int64_t ranks_per_node);

// Collective over WORLD: every rank's hint gathered, then assign_nodes.
std::vector<int64_t> discover_nodes(Communicator& world, const std::string& host, int64_t local_world,
                                    int64_t ranks_per_node);

// Each node's ranks, ascending, nodes in order.
std::vector<std::vector<int64_t>> node_members(const std::vector<int64_t>& node_of_rank);

// 52 bits of NAME's hash: exact in a double (collectives here gather doubles).
uint64_t host_hash(const std::string& name);

}  // namespace loom::parallel
