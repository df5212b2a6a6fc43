#include <c10/util/Exception.h>

#include <catch2/catch.hpp>

#include "parallel/rank_grid.h"

using loom::parallel::GroupKind;
using loom::parallel::RankGrid;
using Groups = std::vector<std::vector<int64_t>>;

TEST_CASE("tp=2 pp=2 dp=2 on 8 ranks matches the layout written by hand", "[rank_grid]") {
  RankGrid grid({2, 2, 2, 1});
  CHECK(grid.world() == 8);
  CHECK(grid.groups(GroupKind::tp) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.groups(GroupKind::dp) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups(GroupKind::pp) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.groups(GroupKind::model_parallel) == Groups{{0, 1, 4, 5}, {2, 3, 6, 7}});
  CHECK(grid.groups(GroupKind::embedding) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.groups(GroupKind::ep) == Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  CHECK(grid.groups(GroupKind::expert_dp) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  const auto c = grid.coords(6);
  CHECK(c.tp == 0);
  CHECK(c.dp == 1);
  CHECK(c.pp == 1);
  CHECK(grid.group_of(GroupKind::tp, 6) == std::vector<int64_t>{6, 7});
}

TEST_CASE("the embedding group is the first and last pipeline stage", "[rank_grid]") {
  RankGrid grid({1, 4, 2, 1});
  CHECK(grid.groups(GroupKind::pp) == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(grid.groups(GroupKind::embedding) == Groups{{0, 6}, {1, 7}});
  CHECK(grid.group_of(GroupKind::embedding, 2).empty());
  RankGrid flat({1, 1, 4, 1});
  CHECK(flat.groups(GroupKind::embedding) == Groups{{0}, {1}, {2}, {3}});
}

TEST_CASE("expert parallelism splits the data-parallel ranks", "[rank_grid]") {
  // tp=2, dp=4 of which ep=2: rank = tp + 2*ep + 4*edp.
  RankGrid grid({2, 1, 4, 2});
  CHECK(grid.groups(GroupKind::dp) == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(grid.groups(GroupKind::ep) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups(GroupKind::expert_dp) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  const auto c = grid.coords(6);
  CHECK(c.dp == 3);
  CHECK(c.ep == 1);
  CHECK(c.expert_dp == 1);
}

TEST_CASE("the order string decides which dimension is fastest", "[rank_grid]") {
  RankGrid dp_first({2, 1, 2, 1}, "dp-tp-pp");
  CHECK(dp_first.groups(GroupKind::dp) == Groups{{0, 1}, {2, 3}});
  CHECK(dp_first.groups(GroupKind::tp) == Groups{{0, 2}, {1, 3}});
  RankGrid pp_first({1, 2, 2, 1}, "pp-dp-tp");
  CHECK(pp_first.groups(GroupKind::pp) == Groups{{0, 1}, {2, 3}});
}

TEST_CASE("every rank sits in exactly one group of each kind", "[rank_grid]") {
  RankGrid grid({2, 2, 4, 2});
  for (auto kind :
       {GroupKind::tp, GroupKind::pp, GroupKind::dp, GroupKind::ep, GroupKind::expert_dp, GroupKind::model_parallel}) {
    std::vector<int> seen(16, 0);
    for (const auto& group : grid.groups(kind)) {
      for (auto r : group) seen[r]++;
    }
    for (int r = 0; r < 16; ++r) CHECK(seen[r] == 1);
  }
}

// A user's bad order or sizes are refused by the config (test_config.cpp); here they are broken invariants.
TEST_CASE("bad orders and sizes break the grid's invariants", "[rank_grid]") {
  CHECK_THROWS_WITH(RankGrid({1, 1, 1, 1}, "tp-xx-dp-pp"), Catch::Contains("'xx'"));
  CHECK_THROWS_WITH(RankGrid({1, 1, 1, 1}, "tp-dp-dp-pp"), Catch::Contains("repeats"));
  CHECK_THROWS_WITH(RankGrid({1, 1, 1, 1}, "tp-dp"), Catch::Contains("lacks"));
  CHECK_THROWS_AS(RankGrid({1, 1, 3, 2}), c10::Error);
}

TEST_CASE("tp=2 cp=2 dp=2 on 8 ranks: cp between tp and dp, gradients over dp x cp", "[rank_grid]") {
  // Order tp-cp-ep-dp-pp: rank = tp + 2 cp + 4 dp.
  RankGrid grid({2, 1, 2, 1, 2});
  CHECK(grid.world() == 8);
  CHECK(grid.groups(GroupKind::tp) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.groups(GroupKind::cp) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups(GroupKind::dp) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.groups(GroupKind::dp_cp) == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(grid.groups(GroupKind::model_parallel) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  const auto c = grid.coords(6);
  CHECK(c.tp == 0);
  CHECK(c.cp == 1);
  CHECK(c.dp == 1);
  CHECK(c.dp_cp == 3);
  // At cp 1 the gradient groups are the dp groups.
  RankGrid plain({2, 2, 2, 1});
  CHECK(plain.groups(GroupKind::dp_cp) == plain.groups(GroupKind::dp));
  CHECK(plain.coords(6).dp_cp == plain.coords(6).dp);
}

TEST_CASE("HSDP cuts the gradient groups into shard groups and replicas across them", "[rank_grid]") {
  // tp=2 dp=4, dp_shard 2: rank = tp + 2 dp; dp groups [0,2,4,6] [1,3,5,7].
  RankGrid grid({2, 1, 4, 1, 1, 2});
  CHECK(grid.hsdp());
  CHECK(grid.hsdp_problem().empty());
  CHECK(grid.groups(GroupKind::dp_shard) == Groups{{0, 2}, {4, 6}, {1, 3}, {5, 7}});
  CHECK(grid.groups(GroupKind::dp_replicate) == Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}});
  CHECK(grid.coords(6).dp_shard == 1);
  CHECK(grid.coords(4).dp_shard == 0);
  // With cp the shard group holds dp_shard dp ranks times cp: tp=1 cp=2 dp=4, rank = cp + 2 dp.
  RankGrid with_cp({1, 1, 4, 1, 2, 2});
  CHECK(with_cp.groups(GroupKind::dp_shard) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(with_cp.groups(GroupKind::dp_replicate) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(with_cp.coords(6).dp_shard == 2);
  // Experts: dp=4 ep=2 (rank = ep + 2 edp), dp_shard 2: each expert-dp group [e, e+2] is split, one rank per shard
  // group.
  RankGrid experts({1, 1, 4, 2, 1, 2});
  CHECK(experts.groups(GroupKind::expert_dp_shard) == Groups{{0}, {2}, {1}, {3}});
  CHECK(experts.groups(GroupKind::expert_dp_replicate) == Groups{{0, 2}, {1, 3}});
  // Without HSDP (dp_shard 0 or dp) the kinds have no groups and the shard index is dp-cp's.
  for (int64_t shard : {0, 4}) {
    RankGrid plain({2, 1, 4, 1, 1, shard});
    CHECK_FALSE(plain.hsdp());
    CHECK(plain.groups(GroupKind::dp_shard).empty());
    CHECK(plain.groups(GroupKind::dp_replicate).empty());
    CHECK(plain.coords(6).dp_shard == plain.coords(6).dp_cp);
  }
}

TEST_CASE("HSDP refuses expert groups that fall unevenly into its shard groups", "[rank_grid]") {
  // Order with dp before ep: dp=6 ep=2, so expert-dp groups hold dp positions {0,1,2} and {3,4,5};
  // dp_shard 2 cuts [0,1,2] into {0,1} and {2}.
  RankGrid grid({1, 1, 6, 2, 1, 2}, "tp-dp-ep-pp");
  CHECK_THAT(grid.hsdp_problem(), Catch::Contains("expert-dp-cp group") && Catch::Contains("2, 1"));
  CHECK_THROWS_AS(grid.groups(GroupKind::expert_dp_replicate), c10::Error);
}
