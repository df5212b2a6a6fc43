// A cluster as the cost model sees it (configs/clusters/*.yaml): GPUs per
// node, nodes, each GPU's peak bf16 FLOP/s and memory, and the alpha-beta
// (latency, inverse bandwidth) of the link inside a node and between nodes.
#pragma once

#include <cstdint>
#include <string>

namespace loom::parallel {

struct ClusterSpec {
  std::string name;
  int64_t gpus_per_node = 8;
  int64_t nodes = 1;
  double peak_flops = 0;       // bf16, per GPU
  double memory_bytes = 0;     // per GPU
  double intra_bandwidth = 0;  // bytes/s per GPU and direction
  double intra_latency = 0;    // seconds
  double inter_bandwidth = 0;
  double inter_latency = 0;
  double compute_efficiency = 0.5;
  // inter_node_nic: per_gpu (each GPU its own NIC, as InfiniBand nodes: any flow gets
  // inter_bandwidth) or shared (one link per node: inter_bandwidth is each GPU's share when all
  // talk at once, and K flows leaving a node at once get gpus_per_node / K of it each).
  bool inter_nic_shared = false;
  // backend: nccl (GPUs) or gloo (CPU ranks, as the simulated fabric's). Over Gloo a reduction's
  // later steps (HSDP's all-reduce across the replicas) start as soon as its first step is done,
  // hidden behind backward like the rest; over NCCL they start when the trainer waits
  // (parallel/later_steps.h).
  std::string backend = "nccl";

  int64_t gpus() const { return gpus_per_node * nodes; }
  bool later_steps_overlap_backward() const { return backend == "gloo"; }
};

// Reads PATH; unknown or missing keys and impossible values throw InputError naming the file and key.
ClusterSpec load_cluster(const std::string& path);

}  // namespace loom::parallel
