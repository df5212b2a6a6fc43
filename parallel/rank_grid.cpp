#include "parallel/rank_grid.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "core/errors.h"

namespace loom::parallel {

std::string group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::tp: return "tp";
    case GroupKind::cp: return "cp";
    case GroupKind::dp_cp: return "dp-cp";
    case GroupKind::expert_dp_cp: return "expert-dp-cp";
    case GroupKind::pp: return "pp";
    case GroupKind::dp: return "dp";
    case GroupKind::ep: return "ep";
    case GroupKind::expert_dp: return "expert-dp";
    case GroupKind::model_parallel: return "model-parallel";
    case GroupKind::embedding: return "embedding";
    case GroupKind::dp_shard: return "dp-shard";
    case GroupKind::dp_replicate: return "dp-replicate";
    case GroupKind::expert_dp_shard: return "expert-dp-shard";
    case GroupKind::expert_dp_replicate: return "expert-dp-replicate";
  }
  return "?";
}

RankGrid::RankGrid(ParallelSizes sizes, const std::string& order) : sizes_(sizes) {
  world_ = sizes.tp * sizes.cp * sizes.pp * sizes.dp;
  TORCH_CHECK(sizes.ep >= 1 && sizes.dp % sizes.ep == 0, "RankGrid: ep ", sizes.ep, " does not divide dp ", sizes.dp);
  TORCH_CHECK(sizes.cp >= 1, "RankGrid: cp ", sizes.cp);
  TORCH_CHECK(sizes.dp_shard >= 0 && (sizes.dp_shard == 0 || sizes.dp % sizes.dp_shard == 0), "RankGrid: dp_shard ",
              sizes.dp_shard, " does not divide dp ", sizes.dp);
  size_ = {sizes.tp, sizes.cp, sizes.ep, sizes.dp / sizes.ep, sizes.pp};

  const std::map<std::string, int> names = {{"tp", kTp}, {"cp", kCp}, {"ep", kEp}, {"dp", kDpInner}, {"pp", kPp}};
  std::vector<int> dims;
  std::stringstream in(order);
  std::string token;
  while (std::getline(in, token, '-')) {
    auto it = names.find(token);
    TORCH_CHECK(it != names.end(), "RankGrid: unknown dimension '", token, "' in order '", order, "'");
    TORCH_CHECK(std::find(dims.begin(), dims.end(), it->second) == dims.end(), "RankGrid: order '", order,
                "' repeats '", token, "'");
    dims.push_back(it->second);
  }
  for (int required : {kTp, kDpInner, kPp}) {
    TORCH_CHECK(std::find(dims.begin(), dims.end(), required) != dims.end(), "RankGrid: order '", order,
                "' lacks tp, dp or pp");
  }
  // Dimensions left out sit just before dp.
  for (int optional : {kCp, kEp}) {
    if (std::find(dims.begin(), dims.end(), optional) == dims.end()) {
      dims.insert(std::find(dims.begin(), dims.end(), kDpInner), optional);
    }
  }
  int64_t stride = 1;
  for (int dim : dims) {
    stride_[dim] = stride;
    stride *= size_[dim];
  }
}

std::vector<std::vector<int64_t>> RankGrid::groups_varying(const std::vector<int>& dims) const {
  // Ranks that agree on every other dimension form one group.
  std::map<std::vector<int64_t>, std::vector<int64_t>> by_key;
  std::vector<std::vector<int64_t>> keys_in_order;
  for (int64_t rank = 0; rank < world_; ++rank) {
    std::vector<int64_t> key;
    for (int dim = 0; dim < kNumDims; ++dim) {
      if (std::find(dims.begin(), dims.end(), dim) == dims.end()) key.push_back(coordinate(rank, dim));
    }
    auto& group = by_key[key];
    if (group.empty()) keys_in_order.push_back(key);
    group.push_back(rank);
  }
  std::vector<std::vector<int64_t>> groups;
  for (const auto& key : keys_in_order) groups.push_back(by_key[key]);
  return groups;
}

std::vector<std::vector<int64_t>> RankGrid::groups(GroupKind kind) const {
  switch (kind) {
    case GroupKind::tp: return groups_varying({kTp});
    case GroupKind::cp: return groups_varying({kCp});
    case GroupKind::dp_cp: return groups_varying({kCp, kEp, kDpInner});
    case GroupKind::expert_dp_cp: return groups_varying({kCp, kDpInner});
    case GroupKind::pp: return groups_varying({kPp});
    case GroupKind::dp: return groups_varying({kEp, kDpInner});
    case GroupKind::ep: return groups_varying({kEp});
    case GroupKind::expert_dp: return groups_varying({kDpInner});
    case GroupKind::model_parallel: return groups_varying({kTp, kPp});
    case GroupKind::dp_shard:
    case GroupKind::expert_dp_shard: {
      std::vector<std::vector<int64_t>> out;
      if (!hsdp()) return out;
      for (auto& pieces : shard_pieces(kind == GroupKind::dp_shard ? GroupKind::dp_cp : GroupKind::expert_dp_cp))
        for (auto& piece : pieces) out.push_back(std::move(piece));
      return out;
    }
    case GroupKind::dp_replicate:
    case GroupKind::expert_dp_replicate: {
      std::vector<std::vector<int64_t>> out;
      if (!hsdp()) return out;
      for (const auto& pieces :
           shard_pieces(kind == GroupKind::dp_replicate ? GroupKind::dp_cp : GroupKind::expert_dp_cp)) {
        for (size_t place = 0; place < pieces.front().size(); ++place) {
          std::vector<int64_t> replica;
          for (const auto& piece : pieces) {
            TORCH_CHECK(piece.size() == pieces.front().size(), "RankGrid: uneven shard groups (", hsdp_problem(), ")");
            replica.push_back(piece[place]);
          }
          out.push_back(std::move(replica));
        }
      }
      return out;
    }
    case GroupKind::embedding: {
      // The stages that hold the tied embedding: the first and the last.
      std::vector<std::vector<int64_t>> groups;
      for (const auto& pipeline : groups_varying({kPp})) {
        if (pipeline.size() == 1) {
          groups.push_back(pipeline);
        } else {
          groups.push_back({pipeline.front(), pipeline.back()});
        }
      }
      return groups;
    }
  }
  return {};
}

std::vector<int64_t> RankGrid::group_of(GroupKind kind, int64_t rank) const {
  for (auto& group : groups(kind)) {
    if (std::find(group.begin(), group.end(), rank) != group.end()) return group;
  }
  return {};
}

int64_t RankGrid::dp_position(int64_t rank) const {
  const int64_t ep = coordinate(rank, kEp), inner = coordinate(rank, kDpInner);
  return stride_[kEp] < stride_[kDpInner] ? ep + size_[kEp] * inner : inner + size_[kDpInner] * ep;
}

std::vector<std::vector<std::vector<int64_t>>> RankGrid::shard_pieces(GroupKind base) const {
  std::vector<std::vector<std::vector<int64_t>>> out;
  for (const auto& group : groups(base)) {
    std::vector<std::vector<int64_t>> pieces;
    std::map<int64_t, size_t> piece_of_block;
    for (int64_t rank : group) {
      const auto [it, added] = piece_of_block.emplace(dp_position(rank) / sizes_.dp_shard, pieces.size());
      if (added) pieces.emplace_back();
      pieces[it->second].push_back(rank);
    }
    out.push_back(std::move(pieces));
  }
  return out;
}

std::string RankGrid::hsdp_problem() const {
  if (!hsdp()) return "";
  for (GroupKind base : {GroupKind::dp_cp, GroupKind::expert_dp_cp}) {
    for (const auto& pieces : shard_pieces(base)) {
      const bool even = std::all_of(pieces.begin(), pieces.end(),
                                    [&](const auto& piece) { return piece.size() == pieces.front().size(); });
      if (even) continue;
      std::ostringstream s;
      s << "the " << group_kind_name(base) << " group of global ranks [";
      std::string sizes;
      size_t n = 0;
      for (const auto& piece : pieces) {
        for (int64_t r : piece) s << (n++ ? ", " : "") << r;
        sizes += (sizes.empty() ? "" : ", ") + std::to_string(piece.size());
      }
      s << "] falls into shard groups of " << sizes << " of its ranks (dp_shard " << sizes_.dp_shard << ", ep "
        << sizes_.ep << "): each shard group must hold as many of them (with ep before dp in parallel.order, "
        << "a dp_shard that ep divides or that divides ep; with ep after dp, one that dp / ep divides or that "
           "divides dp / ep)";
      return s.str();
    }
  }
  return "";
}

void RankGrid::require_even_hsdp() const {
  if (const std::string problem = hsdp_problem(); !problem.empty())
    throw InputError("config key 'parallel.dp_shard': " + problem);
}

RankCoords RankGrid::coords(int64_t rank) const {
  auto position = [&](GroupKind kind) {
    auto group = group_of(kind, rank);
    return static_cast<int64_t>(std::find(group.begin(), group.end(), rank) - group.begin());
  };
  RankCoords c;
  c.tp = coordinate(rank, kTp);
  c.cp = coordinate(rank, kCp);
  c.pp = coordinate(rank, kPp);
  c.dp = position(GroupKind::dp);
  c.ep = coordinate(rank, kEp);
  c.expert_dp = coordinate(rank, kDpInner);
  c.dp_cp = position(GroupKind::dp_cp);
  c.dp_shard = hsdp() ? position(GroupKind::dp_shard) : c.dp_cp;
  return c;
}

}  // namespace loom::parallel
