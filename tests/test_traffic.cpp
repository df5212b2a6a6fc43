#include <catch2/catch.hpp>

#include "core/config.h"
#include "models/gpt.h"
#include "models/gpt_shapes.h"
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

// A small Llama: V 256, H 64, 4 heads of 16 with 2 kv heads, SwiGLU F 172, 2 layers, untied.
// A block holds ln_1 64, q 64 x 64 = 4096, kv 2 x 2 x 16 x 64 = 4096, proj 4096, ln_2 64 and
// gate, up, proj 172 x 64 = 11008 each: 45440; the model 2 x 45440 + wte, lm_head 2 x 16384 + ln_f 64.
Config tiny_llama() {
  Config c;
  c.model.arch = loom::ModelArch::llama;
  c.model.vocab_size = 256;
  c.model.hidden_size = 64;
  c.model.num_heads = 4;
  c.model.num_kv_heads = 2;
  c.model.ffn_hidden_size = 172;
  c.model.num_layers = 2;
  c.model.seq_len = 32;
  c.train.global_batch_size = 8;
  c.train.micro_batch_size = 2;
  loom::resolve_model_defaults(c);
  return c;
}

// C at tp, pp and dp (and sequence parallelism), resolved.
Config at_layout(Config c, int64_t tp, int64_t pp, int64_t dp, bool sp = false) {
  c.parallel.tp = tp;
  c.parallel.pp = pp;
  c.parallel.sequence_parallel = sp;
  loom::resolve_and_validate(c, tp * pp * dp);
  return c;
}

// The predicted (calls, bytes) of GROUP's OP per step at the rank at (tp, pp, dp) of C's grid.
std::pair<int64_t, int64_t> predicted(const Config& c, int64_t tp, int64_t pp, int64_t dp, const std::string& group,
                                      const std::string& op) {
  parallel::RankCoords coords;
  coords.tp = tp;
  coords.pp = pp;
  coords.dp = dp;
  coords.dp_cp = dp;     // cp 1
  coords.dp_shard = dp;  // no HSDP
  const auto all = models::predict_gpt_step_traffic(c, coords);
  const auto it = all.find({group, op});
  return it == all.end() ? std::pair<int64_t, int64_t>{0, 0} : std::pair{it->second.calls, it->second.bytes};
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

TEST_CASE("a measured fit is kept only as a latency >= 0 and a bandwidth > 0", "[traffic]") {
  std::map<std::string, parallel::AlphaBetaFit> fits;
  fits["all_reduce"] = {10, 20e-6, 1e-9};     // 20 us, 1 GB/s
  fits["all_gather"] = {10, -1319e-6, 1e-9};  // a negative latency
  fits["reduce_scatter"] = {10, 5e-6, 0.0};   // no size dependence
  fits["broadcast"] = {10, 5e-6, -1e-10};     // time falling with size
  fits["barrier"] = {1, 5e-6, 0.0};           // one call
  const auto report = parallel::alpha_beta_report(fits);
  CHECK(report.at("all_reduce").at("alpha_us").get<double>() == Approx(20.0));
  CHECK(report.at("all_reduce").at("bandwidth_GBps").get<double>() == Approx(1.0));
  CHECK_FALSE(report.at("all_reduce").contains("no_fit"));
  for (const char* op : {"all_gather", "reduce_scatter", "broadcast", "barrier"}) {
    INFO(op);
    CHECK(report.at(op).contains("no_fit"));
    CHECK_FALSE(report.at(op).contains("alpha_us"));
    CHECK_FALSE(report.at(op).contains("bandwidth_GBps"));
  }
  CHECK_THAT(report.at("all_gather").at("no_fit").get<std::string>(), Catch::Contains("negative latency"));
  CHECK_THAT(report.at("reduce_scatter").at("no_fit").get<std::string>(), Catch::Contains("did not grow"));
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

TEST_CASE("the shape list is the model's parameters, name by name, at GPT-2 and Llama shapes", "[traffic]") {
  Config gpt2;
  gpt2.model.num_layers = 2;
  gpt2.model.hidden_size = 32;
  gpt2.model.vocab_size = 64;
  gpt2.model.seq_len = 16;
  // Qwen3's attention: heads of 32 (hidden 64 / 4 heads would be 16) with q/k norms.
  Config qwen3 = tiny_llama();
  qwen3.model.attention_head_dim = 32;
  qwen3.model.qk_norm = true;
  // DeepSeek's latent attention, with a query latent and without one.
  Config mla = tiny_llama();
  mla.model.num_kv_heads = 0;
  mla.model.mla = {24, 16, 8, 4, 6};
  Config mla_direct = mla;
  mla_direct.model.mla.q_lora_rank = 0;
  // Two multi-token prediction modules after the main blocks.
  Config mtp = mla;
  mtp.model.mtp.depth = 2;
  for (const Config& c : {gpt2, tiny_llama(), qwen3, mla, mla_direct, mtp}) {
    std::vector<models::ParameterShape> shapes = models::gpt_input_parameters(c);
    for (int64_t layer = 0; layer < c.model.num_layers; ++layer) {
      for (auto& s : models::gpt_block_parameters(c, layer)) shapes.push_back(s);
    }
    for (auto& s : models::gpt_output_parameters(c)) shapes.push_back(s);
    const auto params = models::GPTImpl(models::GPTOptions::from_config(c)).parallel_parameters();
    REQUIRE(params.size() == shapes.size());
    int64_t total = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      INFO(params[i].name);
      CHECK(params[i].name == shapes[i].name);
      CHECK(params[i].global_shape_for(1) == shapes[i].shape);
      CHECK(params[i].tp_split_dim == shapes[i].tp_split_dim);
      total += shapes[i].numel();
    }
    CHECK(models::model_num_parameters(c) == total);
    CHECK(models::GPTImpl(models::GPTOptions::from_config(c)).num_parameters() == total);
  }
  // An MoE block counts its router and every expert (all on this one rank).
  Config moe = gpt2;
  moe.model.moe.num_experts = 4;
  moe.model.moe.every = 2;
  int64_t total = 0;
  for (const auto& p : models::GPTImpl(models::GPTOptions::from_config(moe)).parallel_parameters())
    total += p.tensor.numel();
  CHECK(models::model_num_parameters(moe) == total);
  // A Llama-shaped MoE (Qwen3-MoE, DeepSeek-V3): SwiGLU experts of their own width, two shared
  // experts, the first block dense, block 2 dense by mlp_only_layers.
  Config swiglu = tiny_llama();
  swiglu.model.num_layers = 4;
  swiglu.model.moe.num_experts = 4;
  swiglu.model.moe.moe_intermediate_size = 24;
  swiglu.model.moe.n_shared_experts = 2;
  swiglu.model.moe.first_k_dense_replace = 1;
  swiglu.model.moe.mlp_only_layers = {2};
  total = 0;
  int64_t experts = 0, shared = 0;
  for (const auto& p : models::GPTImpl(models::GPTOptions::from_config(swiglu)).parallel_parameters()) {
    total += p.tensor.numel();
    if (p.name.find(".moe.experts.") != std::string::npos) experts += p.tensor.numel();
    if (p.name.find(".moe.shared_experts.") != std::string::npos) shared += p.tensor.numel();
  }
  CHECK(models::model_num_parameters(swiglu) == total);
  const int64_t h = swiglu.model.hidden_size;
  CHECK(experts == 2 * 4 * 3 * h * 24);  // blocks 1 and 3: four experts of gate, up, proj
  CHECK(shared == 2 * 3 * h * 48);       // each: one MLP twice the experts' width
  CHECK(models::moe_expert_numel(swiglu) == 3 * h * 24);
}

TEST_CASE("a Llama's parameter shards add up to the whole model at every tp rule", "[traffic]") {
  const Config c = tiny_llama();
  REQUIRE(models::model_num_parameters(c) == 2 * 45440 + 2 * 16384 + 64);
  // {tp, pp, elements every tp rank holds whole}: at tp 2 each rank has one whole kv head, the
  // norms alone are replicated (2 x 64 per block, ln_f); at tp 4 the kv projection is too (4096 per block).
  for (auto [tp, pp, replicated] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 0}, {2, 1, 2 * 128 + 64}, {4, 1, 2 * (128 + 4096) + 64}, {4, 2, 2 * (128 + 4096) + 64}}) {
    const Config layout = at_layout(c, tp, pp, 1);
    parallel::RankGrid grid({tp, pp, 1, 1});
    int64_t sum = 0;
    for (int64_t r = 0; r < tp * pp; ++r) sum += models::gpt_local_parameters(layout, grid.coords(r));
    INFO("tp " << tp << " pp " << pp);
    // Untied: no copy of wte on the last stage.
    CHECK(sum == models::model_num_parameters(c) + (tp - 1) * replicated);
  }
}

TEST_CASE("a Llama's predicted traffic: GQA's shared kv gradients, untied output, SP norms", "[traffic]") {
  const Config c = tiny_llama();
  const int64_t m = 4, activation = 2 * 32 * 64 * 4;  // 4 micro-batches of [2, 32, 64] fp32
  const int64_t loss = 2 * 32 * 4 + 2 * 2 * 32 * 4;   // the vocab-parallel loss's two all-reduces
  // tp 2: whole kv heads per rank, nothing summed over tp; 2 crossings per block each way, 2 at the ends.
  CHECK(predicted(at_layout(c, 2, 1, 1), 0, 0, 0, "tp", "all_reduce") ==
        std::pair<int64_t, int64_t>{m * 10 + 2 * m, m * 10 * activation + m * loss});
  // tp 4 over 2 kv heads: the replicated kv weights' gradients (2 blocks x 4096) are summed in one more call.
  CHECK(predicted(at_layout(c, 4, 1, 1), 3, 0, 0, "tp", "all_reduce") ==
        std::pair<int64_t, int64_t>{m * 10 + 2 * m + 1, m * 10 * activation + m * loss + 2 * 4096 * 4});
  // Sequence parallelism at tp 2: the RMSNorm weights alone (no biases, no wpe): 2 x 2 x 64 + 64.
  CHECK(predicted(at_layout(c, 2, 1, 1, true), 1, 0, 0, "tp", "all_reduce") ==
        std::pair<int64_t, int64_t>{2 * m + 1, m * loss + (2 * 128 + 64) * 4});

  // pp 2 over dp 2, one bucket: each stage reduces its own parameters, the last stage lm_head
  // instead of a copy of wte, and no embedding group sums anything.
  Config one_bucket = c;
  one_bucket.parallel.bucket_mb = 0;
  const Config pp2 = at_layout(one_bucket, 1, 2, 2);
  CHECK(predicted(pp2, 0, 0, 1, "dp", "all_reduce") == std::pair<int64_t, int64_t>{2, (16384 + 45440) * 4 + 8});
  CHECK(predicted(pp2, 0, 1, 1, "dp", "all_reduce") == std::pair<int64_t, int64_t>{2, (45440 + 64 + 16384) * 4 + 8});
  CHECK(predicted(pp2, 0, 1, 1, "embedding", "all_reduce").first == 0);
  Config tied = one_bucket;
  tied.model.tie_embeddings = true;
  CHECK(predicted(at_layout(tied, 1, 2, 2), 0, 1, 0, "embedding", "all_reduce") ==
        std::pair<int64_t, int64_t>{1, 16384 * 4});
  CHECK(predicted(at_layout(tied, 1, 2, 2), 0, 1, 0, "dp", "all_reduce").second == (16384 + 45440 + 64) * 4 + 8);

  // ZeRO-3 at tp 4, dp 2: a block's unit holds 64 + 1024 + 4096 (kv, whole) + 1024 + 64 + 3 x 2752
  // = 14528 elements, 7264 per dp shard; the kv weight at [1088, 5184) lies in dp rank 0's shard
  // alone, so rank 0 sums 2 x 4096 over tp and rank 1 has nothing to sum: no call.
  Config zero3 = c;
  zero3.parallel.zero_stage = 3;
  const Config z = at_layout(zero3, 4, 1, 2);
  CHECK(predicted(z, 2, 0, 0, "tp", "all_reduce") ==
        std::pair<int64_t, int64_t>{2 * 10 + 2 * 2 + 1, 2 * 10 * activation + 2 * loss + 2 * 4096 * 4});
  CHECK(predicted(z, 2, 0, 1, "tp", "all_reduce") ==
        std::pair<int64_t, int64_t>{2 * 10 + 2 * 2, 2 * 10 * activation + 2 * loss});
}
