// The small GPT and the cluster of 2 nodes x 4 GPUs (links ten times slower between nodes) that
// the cost model's data-parallel tests work their figures on.
#pragma once

#include "core/config.h"
#include "parallel/cluster_spec.h"

namespace loom::test {

inline Config small_gpt_for_plan() {
  Config c;
  c.model.num_layers = 4;
  c.model.hidden_size = 256;
  c.model.num_heads = 4;
  c.model.vocab_size = 1024;
  c.model.seq_len = 128;
  c.train.global_batch_size = 32;
  return c;
}

inline parallel::ClusterSpec two_node_cluster() {
  parallel::ClusterSpec cluster;
  cluster.gpus_per_node = 4;
  cluster.nodes = 2;
  cluster.peak_flops = 1e12;
  cluster.memory_bytes = 80e9;
  cluster.intra_bandwidth = 10e9;
  cluster.intra_latency = 1e-6;
  cluster.inter_bandwidth = 1e9;  // ten times slower between nodes
  cluster.inter_latency = 1e-5;
  return cluster;
}

}  // namespace loom::test
