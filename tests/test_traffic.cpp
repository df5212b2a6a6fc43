#include <catch2/catch.hpp>

#include "core/config.h"
#include "models/gpt.h"
#include "models/gpt_traffic.h"
#include "parallel/rank_grid.h"
#include "parallel/traffic_report.h"

using namespace loom;

namespace {

// A report of WORLD ranks, each sending SENT[r] bytes by OP to rank (r + 1) % WORLD.
nlohmann::json report_of(const std::vector<int64_t>& sent, const std::string& op, std::vector<int64_t> nodes = {}) {
  const size_t world = sent.size();
  if (nodes.empty()) nodes.assign(world, 0);
  nlohmann::json report;
  report["steps"] = 1;
  report["world"] = world;
  for (size_t r = 0; r < world; ++r) {
    report["ranks"].push_back(
        {{"rank", r},
         {"node", nodes[r]},
         {"groups", {{"ep", {{op, {{"calls", 1}, {"bytes", sent[r]}, {"sent", sent[r]}, {"seconds", 0.0}}}}}}}});
    std::vector<int64_t> row(world, 0);
    row[(r + 1) % world] = sent[r];
    report["matrix_sent_bytes"].push_back(row);
  }
  return report;
}

}  // namespace

TEST_CASE("the diagnostics name an MoE job, a hot spot and a tp group across nodes", "[traffic]") {
  parallel::RankGrid dp_only({1, 1, 4, 1});
  CHECK(parallel::traffic_diagnostics(report_of({100, 100, 100, 100}, "all_reduce"), dp_only).empty());

  auto moe = parallel::traffic_diagnostics(report_of({100, 100, 100, 100}, "all_to_all"), dp_only);
  REQUIRE(moe.size() == 1);
  CHECK_THAT(moe[0], Catch::Contains("an MoE job"));

  // Rank 0 sends 1000 to rank 1, which thus receives 10x the median.
  auto hot = parallel::traffic_diagnostics(report_of({1000, 100, 100, 100}, "all_to_all"), dp_only);
  REQUIRE(hot.size() == 2);
  CHECK_THAT(hot[1], Catch::Contains("rank 1 receives 10.0x the median"));

  parallel::RankGrid tp4({4, 1, 1, 1});
  auto split = parallel::traffic_diagnostics(report_of({100, 100, 100, 100}, "all_reduce", {0, 0, 1, 1}), tp4);
  REQUIRE(split.size() == 1);
  CHECK_THAT(split[0], Catch::Contains("spans 2 nodes"));
}

TEST_CASE("the traffic model's parameter shards add up to the whole GPT", "[traffic]") {
  Config c;
  c.model.num_layers = 4;
  c.model.hidden_size = 32;
  c.model.vocab_size = 64;
  c.model.seq_len = 16;
  c.train.global_batch_size = 8;
  c.train.micro_batch_size = 2;
  const int64_t whole = models::GPTImpl(models::GPTOptions::from_config(c)).num_parameters();
  for (auto [tp, pp, v] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 2}}) {
    Config layout = c;
    layout.parallel.tp = tp;
    layout.parallel.pp = pp;
    layout.parallel.virtual_stages = v;
    layout.parallel.schedule = v > 1 ? loom::PipelineSchedule::interleaved : loom::PipelineSchedule::one_f_one_b;
    resolve_and_validate(layout, tp * pp);
    parallel::RankGrid grid({tp, pp, 1, 1});
    int64_t sum = 0;
    for (int64_t r = 0; r < tp * pp; ++r) sum += models::gpt_local_parameters(layout, grid.coords(r));
    // Vocab 64 splits evenly; every tp rank holds the replicated parameters
    // (norms, row biases, wpe); with pp > 1 the last stage holds a copy of the word embedding.
    const int64_t replicated = 4 * 6 * 32 + 16 * 32 + 2 * 32;
    INFO("tp " << tp << " pp " << pp << " v " << v);
    CHECK(sum == whole + (tp - 1) * replicated + (pp > 1 ? 64 * 32 : 0));
  }
}
