// Each group's latency and bandwidth, measured: the counters' running fit (parallel/comm_stats.h)
// is one line per op over all groups, and a group's calls in training are often all one size,
// which fixes no slope. Here every rank all-reduces buffers of a few sizes over each of its groups
// (the kinds in one order on every rank, so the collectives line up), and a line
// time = alpha + beta * bytes is fitted through each size's median. The ring all-reduce of n bytes
// over P ranks takes 2 (P - 1) link latencies and sends 2 (P - 1) / P n bytes over each link, so
// the fit gives the link's own latency and bandwidth, comparable with a cluster file's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "parallel/process_groups.h"

namespace loom::parallel {

struct AlphaBetaProbeOptions {
  std::vector<int64_t> sizes_bytes = {4 << 10, 256 << 10, 4 << 20};
  int64_t repeats = 5;  // per size, after one unmeasured call
  // A size whose all-reduce the group's slowest time at the previous size, scaled by the bytes,
  // puts past this many seconds is not measured, nor the larger ones (0: every size, unbounded): on
  // a slow link the largest would outlast parallel.timeout_s and fail a finished run.
  double max_call_s = 0;
  // A size whose first all-reduce took longer than this on some rank of the group is measured by
  // that call alone, and the larger ones not (with max_call_s): the probe stays short.
  double soft_call_s = 1.0;
};

// Collective over every group of this rank with two ranks or more, then over the world. Returns a
// row per kind of group: [{"group", "ranks", "points": [[bytes, median_s]...], "alpha_us",
//   "bandwidth_GBps" (the link's, from the ring's all-reduce; absent, with "no_bandwidth": why,
//   where the time hardly grew with the size: latency-bound), or "no_fit": why (this rank's group
//   of the kind); "groups": every group of the kind, [{"ranks": [global ranks], "alpha_us",
//   "bandwidth_GBps" or "no_fit", "largest_s"}...]; "slowest": the one of those whose largest
//   all-reduce took longest}...]. Buffers on DEVICE.
nlohmann::json probe_alpha_beta(ProcessGroups& groups, const torch::Device& device,
                                const AlphaBetaProbeOptions& options = {});

}  // namespace loom::parallel
