// The rank grid: pure arithmetic from the parallel sizes and an order string to
// every process group, with no process or communicator involved.
//
// The order lists the dimensions fastest first. With the default
// "tp-cp-ep-dp-pp", tp=2 pp=2 dp=2 on 8 ranks gives rank = tp + 2*dp + 4*pp:
//
//            pp=0          pp=1
//          tp=0 tp=1     tp=0 tp=1
//   dp=0     0    1        4    5
//   dp=1     2    3        6    7
//
//   tp groups [0,1] [2,3] [4,5] [6,7]    pp groups [0,4] [1,5] [2,6] [3,7]
//   dp groups [0,2] [1,3] [4,6] [5,7]    model-parallel [0,1,4,5] [2,3,6,7]
//
// Context parallelism (cp) splits each sequence over cp ranks that hold the same
// model; they average their gradients with dp, so the gradient groups (dp-cp) vary
// both. The model-parallel group (tp x pp) holds one copy of the model.
//
// Expert parallelism splits the data-parallel ranks: the "ep" and "dp" entries
// of the order are the two factors (ep, dp/ep) of the data-parallel dimension.
// An ep group varies ep only, an expert-dp group varies the dp/ep factor only,
// and a dp group varies both.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::parallel {

// cp: the context-parallel group (ranks holding parts of the same sequences). dp_cp and
// expert_dp_cp: the ranks whose gradients are averaged (dp, or expert-dp, times cp), over which
// ZeRO shards; with cp = 1 they are the dp and expert-dp groups themselves.
// HSDP (parallel.dp_shard smaller than dp) cuts each of those gradient groups in two ways:
// dp_shard (expert_dp_shard) holds the members whose dp position lies in the same block of
// dp_shard positions (times cp): ZeRO shards over it; dp_replicate (expert_dp_replicate) holds the
// members at one place of every shard group of a gradient group: each shard's gradients are
// all-reduced over it. Without HSDP they have no groups.
enum class GroupKind {
  tp,
  cp,
  pp,
  dp,
  ep,
  expert_dp,
  dp_cp,
  expert_dp_cp,
  model_parallel,
  embedding,
  dp_shard,
  dp_replicate,
  expert_dp_shard,
  expert_dp_replicate
};

inline constexpr std::array<GroupKind, 14> kAllGroupKinds = {GroupKind::tp,
                                                             GroupKind::cp,
                                                             GroupKind::pp,
                                                             GroupKind::dp,
                                                             GroupKind::ep,
                                                             GroupKind::expert_dp,
                                                             GroupKind::dp_cp,
                                                             GroupKind::expert_dp_cp,
                                                             GroupKind::model_parallel,
                                                             GroupKind::embedding,
                                                             GroupKind::dp_shard,
                                                             GroupKind::dp_replicate,
                                                             GroupKind::expert_dp_shard,
                                                             GroupKind::expert_dp_replicate};

// "tp", "cp", "pp", "dp", "ep", "expert-dp", "dp-cp", "expert-dp-cp", "model-parallel", "embedding",
// "dp-shard", "dp-replicate", "expert-dp-shard", "expert-dp-replicate".
std::string group_kind_name(GroupKind kind);

struct ParallelSizes {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 1;
  int64_t ep = 1;
  int64_t cp = 1;
  int64_t dp_shard = 0;  // HSDP's shard groups, in dp ranks (parallel.dp_shard); 0 or dp: no HSDP
};

struct RankCoords {
  int64_t tp = 0;
  int64_t cp = 0;
  int64_t pp = 0;
  int64_t dp = 0;         // position in the dp group
  int64_t ep = 0;         // position in the ep group
  int64_t expert_dp = 0;  // position in the expert-dp group
  int64_t dp_cp = 0;      // position in the dp-cp group; dp when cp = 1
  int64_t dp_shard = 0;   // ZeRO's shard index: position in the dp-shard group under HSDP, else dp_cp
};

class RankGrid {
 public:
  // ORDER is a permutation of tp, cp, ep, dp, pp (cp and ep may be left out) and
  // ep divides dp: resolve_and_validate refuses a config that breaks either, so
  // here a breach is a bug (c10::Error).
  RankGrid(ParallelSizes sizes, const std::string& order = "tp-cp-ep-dp-pp");

  int64_t world() const { return world_; }
  const ParallelSizes& sizes() const { return sizes_; }
  RankCoords coords(int64_t rank) const;
  // Every group of KIND, each as its ranks in ascending order.
  std::vector<std::vector<int64_t>> groups(GroupKind kind) const;
  // The group of KIND that RANK belongs to (empty for embedding groups RANK is not in).
  std::vector<int64_t> group_of(GroupKind kind, int64_t rank) const;
  // Whether ZeRO shards over part of dp (parallel.dp_shard) and replicates across.
  bool hsdp() const { return sizes_.dp_shard > 0 && sizes_.dp_shard < sizes_.dp; }
  // Why HSDP cannot cut this grid's gradient groups (an expert-dp group whose members fall
  // unevenly into the shard groups); empty when it can, or without HSDP.
  std::string hsdp_problem() const;
  // Throws InputError naming parallel.dp_shard when hsdp_problem() has something to say (exit 2).
  void require_even_hsdp() const;

 private:
  enum Dim { kTp, kCp, kEp, kDpInner, kPp, kNumDims };
  std::vector<std::vector<int64_t>> groups_varying(const std::vector<int>& dims) const;
  // Each group of BASE (dp_cp or expert_dp_cp) cut by the shard block of its members' dp position:
  // the pieces, in order of their first member, per group.
  std::vector<std::vector<std::vector<int64_t>>> shard_pieces(GroupKind base) const;
  // RANK's position in its dp group (ep and the inner dp factor, in rank order).
  int64_t dp_position(int64_t rank) const;
  int64_t coordinate(int64_t rank, int dim) const { return (rank / stride_[dim]) % size_[dim]; }

  ParallelSizes sizes_;
  int64_t world_;
  std::array<int64_t, kNumDims> size_{};
  std::array<int64_t, kNumDims> stride_{};
};

}  // namespace loom::parallel
