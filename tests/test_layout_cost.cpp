#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/errors.h"
#include "launch/dp_variants.h"
#include "launch/expert_plan.h"
#include "launch/layout_cost.h"
#include "launch/memory_check.h"
#include "models/gpt_flops.h"
#include "models/gpt_shapes.h"
#include "two_node_cluster.h"

using namespace loom::parallel;
using namespace loom::launch;

TEST_CASE("model-state bytes reproduce the worked examples", "[plan]") {
  // Mixed-precision Adam: bf16 parameters and gradients (2 + 2) and fp32 master, m and v (12):
  // 16 bytes per parameter, 112 GB for 7B parameters.
  CHECK(model_state_bytes(7e9, 0, 1, {2, 2, 12}) == Approx(112e9));
  // The ZeRO example at 8 GPUs counts 16 bytes of optimizer state (fp32 master, m, v and an fp32
  // gradient copy): 140 GB, 42 GB, 29.75 GB and 17.5 GB, quoted rounded as 140 / 42 / 30 / 18 GB.
  const StateBytes example{2, 2, 16};
  CHECK(model_state_bytes(7e9, 0, 8, example) == Approx(140e9));
  CHECK(model_state_bytes(7e9, 1, 8, example) == Approx(42e9));
  CHECK(model_state_bytes(7e9, 2, 8, example) == Approx(29.75e9));
  CHECK(model_state_bytes(7e9, 3, 8, example) == Approx(17.5e9));
  CHECK(std::abs(model_state_bytes(7e9, 2, 8, example) - 30e9) <= 0.5e9);
  CHECK(std::abs(model_state_bytes(7e9, 3, 8, example) - 18e9) <= 0.5e9);
  // fp32 Adam: 16N, 4N + 4N + 8N/d, 4N + 12N/d, 16N/d.
  const double n = 1e6, d = 4;
  CHECK(model_state_bytes(n, 0, 4, {4, 4, 8}) == Approx(16 * n));
  CHECK(model_state_bytes(n, 1, 4, {4, 4, 8}) == Approx(8 * n + 8 * n / d));
  CHECK(model_state_bytes(n, 2, 4, {4, 4, 8}) == Approx(4 * n + 12 * n / d));
  CHECK(model_state_bytes(n, 3, 4, {4, 4, 8}) == Approx(16 * n / d));
}

TEST_CASE("collective times, tp volume, bubble and crossover follow the formulas", "[plan]") {
  const double alpha = 5e-6, beta = 1.0 / 50e9;  // an InfiniBand NIC: 5 us, 50 GB/s
  // Ring all-reduce of 1 GB over 8: 2 * 7/8 * 1 GB / 50 GB/s + 14 * 5 us = 35 ms + 70 us.
  CHECK(ring_all_reduce_time(1e9, 8, alpha, beta) == Approx(0.035 + 70e-6));
  CHECK(ring_all_gather_time(1e9, 8, alpha, beta) == Approx(0.0175 + 35e-6));
  CHECK(point_to_point_time(1e6, alpha, beta) == Approx(5e-6 + 20e-6));
  CHECK(ring_all_reduce_time(1e9, 1, alpha, beta) == 0);
  // Below alpha / beta = 250 KB a message is latency-bound.
  CHECK(crossover_bytes(alpha, beta) == Approx(250e3));
  // Per layer and micro-batch tp moves 4 all-reduces of B*S*H elements: 4 * 2(T-1)/T * B*S*H.
  CHECK(tp_layer_volume_elements(1, 2048, 12288, 8) == Approx(4 * 2 * 7.0 / 8 * 2048 * 12288));
  CHECK(pipeline_bubble(4, 8, 1) == Approx(3.0 / 11));
  CHECK(pipeline_bubble(8, 64, 2) == Approx(7.0 / 135));
  // Activations per layer: S B H (34 + 5 a S / H) / t; selective drops the attention term.
  CHECK(layer_activation_bytes(2048, 1, 12288, 96, 8, loom::Recompute::none, 34) ==
        Approx(2048.0 * 12288 * (34 + 5.0 * 96 * 2048 / 12288) / 8));
  CHECK(layer_activation_bytes(2048, 1, 12288, 96, 8, loom::Recompute::selective, 34) ==
        Approx(2048.0 * 12288 * 34 / 8));
  CHECK(layer_activation_bytes(2048, 1, 12288, 96, 8, loom::Recompute::full, 34) == Approx(2.0 * 2048 * 12288 / 8));
}

TEST_CASE("GPT-3 175B on 1,024 H100s: the best layout keeps tp inside a node", "[plan]") {
  loom::Config c;
  c.model.num_layers = 96;
  c.model.hidden_size = 12288;
  c.model.num_heads = 96;
  c.model.vocab_size = 51200;
  c.model.seq_len = 2048;
  c.train.global_batch_size = 1536;
  c.train.precision = loom::TrainPrecision::bf16;
  CHECK(layer_activation_coefficient(c) == 34);
  CHECK(static_cast<double>(loom::models::model_num_parameters(c)) == Approx(175e9).epsilon(0.01));
  const auto cluster = load_cluster(std::string(LOOM_SOURCE_DIR) + "/configs/clusters/h100_sxm_8x_ib.yaml");
  const auto all = enumerate_layouts(c, cluster, 1024);
  REQUIRE(!all.empty());
  const auto& best = all.front();
  INFO("best tp " << best.layout.tp << " pp " << best.layout.pp << " dp " << best.layout.dp);
  CHECK(best.fits);
  CHECK(best.layout.tp <= cluster.gpus_per_node);
  CHECK(best.layout.tp * best.layout.pp * best.layout.dp == 1024);
  CHECK(best.mfu > 0.2);
  CHECK(best.mfu < cluster.compute_efficiency);
  // Without ZeRO, two-way model parallelism cannot hold 175B parameters' state on 80 GB.
  bool saw_oom = false;
  for (const auto& e : all) {
    if (e.layout.tp * e.layout.pp <= 2 && e.layout.zero_stage == 0) {
      CHECK(!e.fits);
      CHECK_THAT(e.verdict, Catch::StartsWith("out of memory"));
      CHECK(e.reason == "out of memory");
      saw_oom = true;
    }
  }
  CHECK(saw_oom);
}

TEST_CASE("cluster files with a missing or unknown key are refused naming it", "[plan]") {
  const auto dir = std::filesystem::temp_directory_path();
  const auto good = std::string(LOOM_SOURCE_DIR) + "/configs/clusters/a100_sxm_8x_ib.yaml";
  CHECK(load_cluster(good).gpus() == 128);
  const auto unknown = (dir / "loom_cluster_unknown.yaml").string();
  std::ofstream(unknown) << "gpus_per_node: 8\nnodes: 1\nnvlink_speed: 3\n";
  CHECK_THROWS_WITH(load_cluster(unknown), Catch::Contains("unknown key 'nvlink_speed'") && Catch::Contains(unknown));
  const auto nic = (dir / "loom_cluster_nic.yaml").string();
  std::ofstream(nic) << "gpus_per_node: 2\nnodes: 2\npeak_bf16_tflops: 1\nmemory_gb: 8\nintra_node_bandwidth_GBps: 1\n"
                        "intra_node_latency_us: 1\ninter_node_bandwidth_GBps: 1\ninter_node_latency_us: 1\n"
                        "inter_node_nic: pooled\n";
  CHECK_THROWS_WITH(load_cluster(nic), Catch::Contains("inter_node_nic") && Catch::Contains("pooled"));
  CHECK_FALSE(load_cluster(good).inter_nic_shared);
  const auto fabric = load_cluster(std::string(LOOM_SOURCE_DIR) + "/configs/clusters/fabric_2x2_100mbit.yaml");
  CHECK(fabric.inter_nic_shared);
  CHECK(fabric.later_steps_overlap_backward());  // backend: gloo
  CHECK(load_cluster(good).backend == "nccl");
  const auto backend = (dir / "loom_cluster_backend.yaml").string();
  std::ofstream(backend)
      << "gpus_per_node: 2\nnodes: 2\npeak_bf16_tflops: 1\nmemory_gb: 8\nintra_node_bandwidth_GBps: 1\n"
         "intra_node_latency_us: 1\ninter_node_bandwidth_GBps: 1\ninter_node_latency_us: 1\n"
         "backend: mpi\n";
  CHECK_THROWS_WITH(load_cluster(backend), Catch::Contains("'backend'") && Catch::Contains("mpi"));
  const auto missing = (dir / "loom_cluster_missing.yaml").string();
  std::ofstream(missing) << "gpus_per_node: 8\nnodes: 1\n";
  CHECK_THROWS_WITH(load_cluster(missing), Catch::Contains("missing key 'peak_bf16_tflops'"));
  CHECK_THROWS_AS(load_cluster((dir / "nope.yaml").string()), loom::InputError);
  // A key given twice, an efficiency above peak, an infinite link: refused, naming the key.
  const std::string base =
      "gpus_per_node: 2\nnodes: 2\npeak_bf16_tflops: 1\nmemory_gb: 8\nintra_node_bandwidth_GBps: 1\n"
      "intra_node_latency_us: 1\ninter_node_latency_us: 1\n";
  const auto odd = (dir / "loom_cluster_odd.yaml").string();
  std::ofstream(odd) << base << "inter_node_bandwidth_GBps: 1\nnodes: 4\n";
  CHECK_THROWS_WITH(load_cluster(odd), Catch::Contains("key 'nodes' is given twice"));
  std::ofstream(odd, std::ios::trunc) << base << "inter_node_bandwidth_GBps: 1\ncompute_efficiency: 2\n";
  CHECK_THROWS_WITH(load_cluster(odd), Catch::Contains("'compute_efficiency'") && Catch::Contains("from 0.001 to 1"));
  std::ofstream(odd, std::ios::trunc) << base << "inter_node_bandwidth_GBps: .inf\n";
  CHECK_THROWS_WITH(load_cluster(odd), Catch::Contains("'inter_node_bandwidth_GBps' must be from 0.001 to 1000000"));
  // A negative latency, a fraction of a node, a list where a word goes: each named (a negative latency
  // once gave negative step times; a list, yaml-cpp's "bad conversion" and exit 1).
  const std::string no_latency =
      "nodes: 2\npeak_bf16_tflops: 1\nmemory_gb: 8\nintra_node_bandwidth_GBps: 1\nintra_node_latency_us: 1\n"
      "inter_node_bandwidth_GBps: 1\n";
  std::ofstream(odd, std::ios::trunc) << no_latency << "gpus_per_node: 2\ninter_node_latency_us: -0.5\n";
  CHECK_THROWS_WITH(load_cluster(odd), Catch::Contains("'inter_node_latency_us' must be from 0 to 1000000"));
  std::ofstream(odd, std::ios::trunc) << no_latency << "gpus_per_node: 0.5\ninter_node_latency_us: 1\n";
  CHECK_THROWS_WITH(load_cluster(odd), Catch::Contains("'gpus_per_node' must be a whole number from 1"));
  std::ofstream(odd, std::ios::trunc) << no_latency << "gpus_per_node: 2\ninter_node_latency_us: 1\nbackend: [gloo]\n";
  CHECK_THROWS_WITH(load_cluster(odd), Catch::Contains("'backend' must be a word"));
}

namespace {

loom::Config read_config(const std::string& name) {
  return loom::load_config(std::string(LOOM_SOURCE_DIR) + "/configs/" + name);
}

}  // namespace

TEST_CASE("parameter counts: GPT-2 124M and the Llama configs' published sizes", "[plan]") {
  loom::Config gpt2;
  gpt2.model.vocab_size = 50257;
  gpt2.model.seq_len = 1024;
  gpt2.model.hidden_size = 768;
  gpt2.model.num_heads = 12;
  gpt2.model.num_layers = 12;
  CHECK(loom::models::model_num_parameters(gpt2) == 124439808);
  // Hugging Face's counts: SmolLM2 and Llama 3.2 tie the output layer to the embedding, TinyLlama does not.
  CHECK(loom::models::model_num_parameters(read_config("smollm2_135m.yaml")) == 134515008);
  CHECK(loom::models::model_num_parameters(read_config("tinyllama_1_1b.yaml")) == 1100048384);
  CHECK(loom::models::model_num_parameters(read_config("llama3_2_1b.yaml")) == 1235814400);
  // The MoE configs against their releases' published totals and activated counts (Mixtral 8x7B:
  // 46.7B and 12.9B; Qwen3-30B-A3B: 30.5B and 3.3B), worked out from their config.json shapes.
  CHECK(loom::models::model_num_parameters(read_config("mixtral_8x7b.yaml")) == 46702792704);
  CHECK(loom::models::activated_parameters_per_token(read_config("mixtral_8x7b.yaml")) == 12879925248);
  CHECK(loom::models::model_num_parameters(read_config("qwen3_30b_a3b.yaml")) == 30532122624);
  CHECK(loom::models::activated_parameters_per_token(read_config("qwen3_30b_a3b.yaml")) == 3353032704);
  CHECK(loom::models::activated_parameters_per_token(read_config("llama3_2_1b.yaml")) == 1235814400);
  // DeepSeek-V3: 671B, 37B activated (its report), and one MTP module of 11.6B (the release's 685B
  // adds its copies of the embedding and output layer, 1.85B): worked from its shapes (latent
  // attention 187,121,664 a block; an MoE block 256 x 44,040,192 experts, a shared one, the router).
  const auto deepseek = read_config("deepseek_v3_671b.yaml");
  CHECK(loom::models::model_num_parameters(deepseek) - loom::models::mtp_num_parameters(deepseek) == 671026404352);
  CHECK(loom::models::activated_parameters_per_token(deepseek) == 37552282624);
  CHECK(loom::models::mtp_num_parameters(deepseek) == 11610067968);
}

TEST_CASE("a small Llama's FLOPs, activation coefficient and parameters per rank, worked by hand", "[plan]") {
  loom::Config c;
  c.model.arch = loom::ModelArch::llama;
  c.model.vocab_size = 256;
  c.model.hidden_size = 64;
  c.model.num_heads = 4;
  c.model.num_kv_heads = 2;
  c.model.ffn_hidden_size = 172;
  c.model.num_layers = 2;
  c.model.seq_len = 32;
  loom::resolve_model_defaults(c);
  // Per block: ln_1, ln_2 64 each (RMSNorm, no bias); q and proj 64 x 64; kv 2 kv heads x 2 x 16 x 64;
  // gate, up, proj 172 x 64. Untied: wte and lm_head 256 x 64; ln_f 64; no wpe under RoPE.
  const int64_t block = 2 * 64 + 2 * 4096 + 4096 + 3 * 11008;
  CHECK(loom::models::model_num_parameters(c) == 2 * block + 2 * 16384 + 64);
  // 6 x (per block q, kv, proj 12288 + gate, up, proj 33024; the output layer 16384) + 12 L h S.
  CHECK(loom::models::gpt_flops_per_token(c) == 6.0 * (2 * (12288 + 33024) + 16384) + 12.0 * 2 * 64 * 32);
  // 4 (norms) + 11 (attention: K and V expanded to every query head) + 3 + 6 x 172/64 (SwiGLU) = 34.125.
  CHECK(layer_activation_coefficient(c) == Approx(34.125));
  // tp 2 splits the kv heads (one per rank); tp 4 replicates the kv projection (8192 in all).
  const double n = static_cast<double>(loom::models::model_num_parameters(c));
  CHECK(parameters_per_rank(c, 2, 1) == Approx((n - 320) / 2 + 320));
  // pp 2: half the rest each; the last stage's ln_f (64) and lm_head quarter (4096) outweigh the
  // first's wte quarter (4096).
  const double whole = (n - 320 - 8192) / 4 + 320 + 8192;
  CHECK(parameters_per_rank(c, 4, 2) == Approx((whole - 4096 - 4160) / 2 + 4160));
}

TEST_CASE("loom plan on TinyLlama: GQA's tp rule, the replicated kv projections' memory and traffic", "[plan]") {
  const auto c = read_config("tinyllama_1_1b.yaml");
  const double n = 1100048384;
  // At tp 4 each rank holds one whole kv head: only the RMSNorm weights are replicated (2 per
  // block and ln_f). At tp 8 the 4 kv heads' projections, 2 x 4 x 64 x 2048 per block, are too.
  const double norms = 2 * 2048 * 22 + 2048, kv = 22 * 2.0 * 4 * 64 * 2048;
  CHECK(parameters_per_rank(c, 4, 1) == Approx((n - norms) / 4 + norms));
  CHECK(parameters_per_rank(c, 8, 1) == Approx((n - norms - kv) / 8 + norms + kv));
  CHECK(parameters_per_rank(c, 8, 1) == Approx(157771776));

  const auto cluster = load_cluster(std::string(LOOM_SOURCE_DIR) + "/configs/clusters/h100_sxm_8x_ib.yaml");
  // tp 8 moves, beyond the activations' all-reduces, the norms' and kv projections' gradients
  // once a step, in fp32 (the masters'): 2 (tp - 1) / tp x (2 x 2048 + 2 x 4 x 64 x 2048) x 22 x 4 bytes.
  Layout tp8{8, 1, 1, 1, 0, 1, loom::Recompute::none};
  Layout tp4 = tp8;
  tp4.tp = 4;
  const auto at8 = estimate_layout(c, cluster, tp8), at4 = estimate_layout(c, cluster, tp4);
  REQUIRE(at8.traffic.size() == 1);
  // bf16 activations (2 bytes); micro-batches of one sequence of 2048.
  REQUIRE(c.train.precision == loom::TrainPrecision::bf16);
  const double micro_batches = static_cast<double>(c.train.global_batch_size);
  const double activation = 2048.0 * 2048 * 2;
  CHECK(at8.traffic[0].bytes == Approx(micro_batches * 22 * 4 * 2 * 7.0 / 8 * activation +
                                       2 * 7.0 / 8 * (2 * 2048 + 2 * 4 * 64 * 2048) * 22 * 4));
  CHECK(at4.traffic[0].bytes ==
        Approx(micro_batches * 22 * 4 * 2 * 3.0 / 4 * activation + 2 * 3.0 / 4 * (2 * 2048) * 22 * 4));
  // 4 kv heads lay over tp 1, 2, 4 and 8 (32 heads allow them all); the best layout fits.
  const auto all = enumerate_layouts(c, cluster, 64);
  REQUIRE(!all.empty());
  CHECK(all.front().fits);
  for (const auto& e : all) CHECK((4 % e.layout.tp == 0 || e.layout.tp % 4 == 0));
  // SmolLM2's 9 heads (3 kv heads) allow no tp but 1 among the powers of two loom plan tries.
  for (const auto& e : enumerate_layouts(read_config("smollm2_135m.yaml"), cluster, 8)) CHECK(e.layout.tp == 1);
}

TEST_CASE("context parallelism in the cost model: activations over cp, ring bytes, and long sequences pick it",
          "[plan]") {
  loom::Config c = loom::load_config(std::string(LOOM_SOURCE_DIR) + "/configs/llama3_2_1b.yaml", {});
  c.model.seq_len = 65536;
  c.train.global_batch_size = 16;
  const auto cluster = load_cluster(std::string(LOOM_SOURCE_DIR) + "/configs/clusters/h100_sxm_8x_ib.yaml");
  auto estimate = [&](int64_t cp, loom::ContextComm comm, loom::Recompute recompute) {
    Layout l{1, 1, 16 / cp, 1, 1, 1, recompute, cp, comm};
    return estimate_layout(c, cluster, l);
  };
  using loom::ContextComm;
  using loom::Recompute;
  // Without the attention scores (selective recomputation) everything a layer keeps is per token: a quarter at cp 4.
  const auto one = estimate(1, ContextComm::p2p, Recompute::selective);
  const auto four = estimate(4, ContextComm::p2p, Recompute::selective);
  CHECK(four.activation_bytes == Approx(one.activation_bytes / 4).epsilon(1e-12));
  // With them, the ring keeps (S/cp)^2 blocks: less than a quarter; all-to-all a cp-th of the heads over S x S.
  const auto ring = estimate(4, ContextComm::p2p, Recompute::none),
             whole = estimate(1, ContextComm::p2p, Recompute::none);
  CHECK(ring.activation_bytes < whole.activation_bytes / 4);
  const auto a2a = estimate(4, ContextComm::a2a, Recompute::none);
  CHECK(a2a.activation_bytes > ring.activation_bytes);
  CHECK(a2a.activation_bytes == Approx(whole.activation_bytes / 4).epsilon(1e-12));
  // The ring's bytes by hand: 4 micro-batches (16 sequences over dp 4) x 16 layers x (cp-1) ring steps x
  // (2 forwards, recomputation's included, + 2 in backward: keys and values again, then their
  // gradients) shards of 2 (k, v) x B=1 x S/cp x 8 kv heads x 64 x 2 bytes.
  double ring_bytes = 0;
  for (const auto& t : four.traffic) {
    if (t.group == "cp") ring_bytes = t.bytes;
  }
  const double shard = 2.0 * 1 * (65536 / 4) * 8 * 64 * 2;
  CHECK(ring_bytes == Approx(4.0 * 16 * (4 - 1) * (2 + 2) * shard).epsilon(1e-12));
  bool dp_cp = false;
  for (const auto& t : four.traffic) dp_cp |= t.group == "dp-cp";
  CHECK(dp_cp);
  // At 64K tokens a sequence's activations do not fit a rank without cp: the best layout splits it.
  const auto all = enumerate_layouts(c, cluster, 16);
  REQUIRE(!all.empty());
  CHECK(all.front().fits);
  CHECK(all.front().layout.cp > 1);
  // At the same time and traffic the smaller memory comes first (ZeRO-1's 51 GB before ZeRO-0's 65 GB).
  CHECK(all.front().layout.zero_stage > 0);
  for (size_t i = 0; i + 1 < all.size() && all[i + 1].fits; ++i) {
    const auto &a = all[i], &b = all[i + 1];
    if (std::llround(a.step_s * 1e6) == std::llround(b.step_s * 1e6) &&
        total_traffic_bytes(a) == total_traffic_bytes(b)) {
      CHECK(a.memory_bytes <= b.memory_bytes);
    }
  }
  // At 2048 tokens cp is not considered.
  c.model.seq_len = 2048;
  for (const auto& e : enumerate_layouts(c, cluster, 16)) CHECK(e.layout.cp == 1);
}

TEST_CASE("loom plan counts Muon's one momentum for the blocks' matrices, AdamW's two moments for the rest", "[plan]") {
  loom::Config c = loom::load_config(std::string(LOOM_SOURCE_DIR) + "/tests/configs/tiny.yaml", {});
  loom::resolve_and_validate(c, 1);
  ClusterSpec cluster;
  cluster.memory_bytes = 1e12;
  cluster.peak_flops = cluster.intra_bandwidth = cluster.inter_bandwidth = 1e12;
  const auto adamw = estimate_layout(c, cluster, Layout{});
  c.train.optimizer = loom::OptimizerKind::muon;
  const auto muon = estimate_layout(c, cluster, Layout{});
  // Two layers of qkv (3 h^2), proj (h^2), fc and proj (4 h^2 each) at h = 32.
  const double matrices = 2.0 * 12 * 32 * 32;
  CHECK(muon_parameter_fraction(c) * static_cast<double>(loom::models::model_num_parameters(c)) == Approx(matrices));
  CHECK(adamw.state_bytes - muon.state_bytes == Approx(4 * matrices));
  // ZeRO-1 at dp 2: AdamW's moment shards still cover Muon's weights (whole buckets), and the
  // owners' momenta, a half on each rank, come on top.
  Layout zero1;
  zero1.dp = 2;
  zero1.zero_stage = 1;
  c.train.global_batch_size = 8;
  const auto muon_zero1 = estimate_layout(c, cluster, zero1);
  c.train.optimizer = loom::OptimizerKind::adamw;
  const auto adamw_zero1 = estimate_layout(c, cluster, zero1);
  CHECK(muon_zero1.state_bytes - adamw_zero1.state_bytes == Approx(4 * matrices / 2));
}

TEST_CASE("the memory check refuses a model the machine cannot hold, naming its sizes and both numbers", "[plan]") {
  using loom::launch::estimate_rank_memory;
  using loom::launch::memory_refusal;
  loom::Config c = loom::load_config(std::string(LOOM_SOURCE_DIR) + "/tests/configs/tiny.yaml", {});
  loom::resolve_and_validate(c, 1);
  // fp32 Adam: 16 bytes of state per parameter, one rank holding them all.
  const auto tiny = estimate_rank_memory(c);
  CHECK(tiny.parameters == static_cast<double>(loom::models::model_num_parameters(c)));
  CHECK(tiny.state_bytes == Approx(16 * tiny.parameters));
  CHECK(tiny.activation_bytes > 0);
  CHECK(memory_refusal(c, tiny, 2, 1e9, "this machine's memory").empty());
  const std::string refusal = memory_refusal(c, tiny, 2, tiny.rank_bytes() * 1.5, "this machine's memory");
  INFO(refusal);
  CHECK_THAT(refusal, Catch::Contains("per rank") && Catch::Contains("x 2 ranks") &&
                          Catch::Contains("more than this machine's memory") &&
                          Catch::Contains("model.hidden_size = 32") && Catch::Contains("train.memory_check=false"));
  // ZeRO-3 over 4 ranks holds a quarter of the state.
  loom::Config sharded =
      loom::load_config(std::string(LOOM_SOURCE_DIR) + "/tests/configs/tiny.yaml", {"parallel.zero_stage=3"});
  loom::resolve_and_validate(sharded, 4);
  CHECK(estimate_rank_memory(sharded).state_bytes == Approx(tiny.state_bytes / 4));
  // A trillion parameters is counted, not allocated: 65536 wide and 256 deep.
  loom::Config big = loom::load_config(std::string(LOOM_SOURCE_DIR) + "/tests/configs/tiny.yaml",
                                       {"model.hidden_size=65536", "model.num_heads=512", "model.num_layers=256"});
  loom::resolve_and_validate(big, 1);
  const auto trillion = estimate_rank_memory(big);
  CHECK(trillion.parameters > 1e13);
  CHECK_THAT(memory_refusal(big, trillion, 1, 24e9, "this machine's memory"), Catch::Contains("does not fit"));
  // Past 1e15 parameters the sizes are refused as such, whatever the memory.
  loom::Config absurd = loom::load_config(
      std::string(LOOM_SOURCE_DIR) + "/tests/configs/tiny.yaml",
      {"model.hidden_size=262144", "model.num_heads=1024", "model.num_layers=16384", "model.ffn_hidden_size=1048576"});
  loom::resolve_and_validate(absurd, 1);
  const auto beyond = estimate_rank_memory(absurd);
  CHECK_THAT(memory_refusal(absurd, beyond, 1, 1e30, "x"), Catch::Contains("more than loom can train (1e15)"));
}

TEST_CASE("expert plan: experts, their state and all-to-all bytes per rank, worked by hand", "[plan][moe]") {
  // Qwen3-30B-A3B on 64 ranks (tp 1, cp 1, pp 1: dp 64), bf16: 48 MoE blocks of 128 SwiGLU experts
  // of 3 x 2048 x 768 = 4,718,592 parameters; 1024 x 4096 / 64 = 65,536 tokens routed per rank.
  loom::Config c = loom::load_config(std::string(LOOM_SOURCE_DIR) + "/configs/qwen3_30b_a3b.yaml", {});
  const auto degrees = loom::launch::expert_parallel_degrees(c, 64);
  CHECK(degrees == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64});
  const auto e = loom::launch::expert_plan(c, 64, 8);
  CHECK(e.moe_layers == 48);
  CHECK(e.experts_per_rank == 16);
  CHECK(e.expert_parameters == 48.0 * 16 * 4718592);        // 3,623,878,656
  CHECK(e.expert_state_bytes == 48.0 * 16 * 4718592 * 18);  // bf16 + fp32 grad, master, m, v
  CHECK(e.routed_tokens == 65536.0);
  // 48 blocks x 4 (dispatch, combine; forward, backward) x 65,536 tokens x 8 copies x 7/8 leaving
  // x 2048 x 2 bytes.
  CHECK(e.all_to_all_bytes == Approx(360777252864.0).epsilon(1e-12));
  CHECK(loom::launch::expert_plan(c, 64, 1).all_to_all_bytes == 0.0);
  // pp 2 halves the blocks a rank holds and sends for; sequence parallelism at tp 2 halves the
  // tokens each tp rank routes, and dp with them.
  c.parallel.pp = 2;
  CHECK(loom::launch::expert_plan(c, 64, 8).expert_parameters == 24.0 * 16 * 4718592);
  // Blocks 0-3 dense: the second stage (24-47) is the busiest, with all 24 of its blocks.
  c.model.moe.first_k_dense_replace = 4;
  CHECK(loom::launch::expert_plan(c, 64, 8).expert_parameters == 24.0 * 16 * 4718592);
  c.model.moe.first_k_dense_replace = 0;
  c.parallel.pp = 1;
  // Full recomputation sends the forward's two exchanges again: 6 where there were 4.
  c.train.recompute = loom::Recompute::full;
  CHECK(loom::launch::expert_plan(c, 64, 8).all_to_all_bytes == Approx(360777252864.0 * 6 / 4).epsilon(1e-12));
  c.train.recompute = loom::Recompute::none;
  c.parallel.tp = 2;
  c.parallel.sequence_parallel = true;
  CHECK(loom::launch::expert_plan(c, 64, 8).routed_tokens == 1024.0 * 4096 / 32 / 2);
  CHECK(loom::launch::expert_plan(c, 64, 8).expert_tp_bytes == 0.0);
  // Experts split over tp 2: half their parameters on a rank; every tp rank routes the whole
  // sequence (1024 x 4096 / dp 32 = 131,072 tokens); per block, forward and backward, an all-reduce
  // of the 131,072 x 8 rows (2 x 1/2 of them sent) and a gather of the 131,072 tokens (1/2 of them
  // sent), of 2048 x 2 bytes each: 48 x 2 x (131,072 x 8 + 65,536) x 4096 = 438,086,664,192 bytes.
  c.parallel.expert_tp = 2;
  const auto split = loom::launch::expert_plan(c, 64, 8);
  CHECK(split.expert_parameters == 48.0 * 16 * 4718592 / 2);
  CHECK(split.routed_tokens == 1024.0 * 4096 / 32);
  CHECK(split.expert_tp_bytes == Approx(438086664192.0).epsilon(1e-12));
  c.parallel.sequence_parallel = false;
  CHECK(loom::launch::expert_plan(c, 64, 8).expert_tp_bytes == Approx(48.0 * 2 * 131072 * 8 * 4096).epsilon(1e-12));
}

TEST_CASE("dp variants: flat, hierarchical and compressed reductions follow the background's formulas", "[plan]") {
  const loom::Config c = loom::test::small_gpt_for_plan();
  const ClusterSpec cluster = loom::test::two_node_cluster();
  Layout l;
  l.dp = 8;
  l.micro_batch = 4;
  const auto e = estimate_layout(c, cluster, l);
  const double S = e.parameters_per_rank * 4;  // fp32 gradients
  const auto flat = dp_variant_cost(c, cluster, e, {loom::DpCollectives::flat, loom::GradCompression::none, 1});
  const auto two = dp_variant_cost(c, cluster, e, {loom::DpCollectives::hierarchical, loom::GradCompression::none, 1});
  REQUIRE(flat.ranks == 8);
  CHECK(flat.per_node == 4);
  CHECK(flat.nodes == 2);
  // The flat ring: 2(Q-1)/Q S per rank, N of its Q links across nodes; at the slow link's speed.
  CHECK(flat.intra_bytes + flat.inter_bytes == Approx(2.0 * 7 / 8 * S));
  CHECK(flat.inter_bytes == Approx(2.0 * 7 / 8 * S * 2 / 8));
  CHECK(flat.seconds == Approx(ring_all_reduce_time(S, 8, 1e-5, 1e-9)));
  CHECK(flat.seconds == Approx(e.dp_s));
  // Hierarchical: 2(L-1)/L S inside, 2(N-1)/N S/L across.
  CHECK(two.intra_bytes == Approx(2.0 * 3 / 4 * S));
  CHECK(two.inter_bytes == Approx(2.0 * 1 / 2 * S / 4));
  CHECK(two.seconds ==
        Approx(2 * ring_all_gather_time(S, 4, 1e-6, 1e-10) + ring_all_reduce_time(S / 4, 2, 1e-5, 1e-9)));
  CHECK(two.seconds < flat.seconds);
  // Compression: half, a quarter plus the scales, (n + m) r per matrix.
  const auto bf16 = dp_variant_cost(c, cluster, e, {loom::DpCollectives::flat, loom::GradCompression::bf16, 1});
  const auto int8 = dp_variant_cost(c, cluster, e, {loom::DpCollectives::flat, loom::GradCompression::int8, 1});
  const auto psgd = dp_variant_cost(c, cluster, e, {loom::DpCollectives::flat, loom::GradCompression::powersgd, 4});
  CHECK(bf16.payload_bytes == Approx(S / 2));
  CHECK(int8.payload_bytes == Approx(S / 4 * (1 + 4.0 / 256)));
  // A block's matrices at hidden 256 (qkv 768 x 256, proj 256 x 256, fc 1024 x 256, fc2 256 x 1024) at rank 4.
  const double matrices = (768 + 256) * 4 + (256 + 256) * 4 + (1024 + 256) * 4 + (256 + 1024) * 4.0;
  const double vectors = 768 + 256 + 1024 + 256 + 4 * 256.0;  // biases and the two LayerNorms' weights and biases
  const double block = 768 * 256 + 256 * 256 + 1024 * 256 + 256 * 1024 + vectors;
  CHECK(psgd.payload_bytes == Approx(S * (matrices + vectors) / block));
  // Compression is for the all-reduced buckets (ZeRO 0 and 1) only.
  Layout z3 = l;
  z3.zero_stage = 3;
  const auto e3 = estimate_layout(c, cluster, z3);
  CHECK_FALSE(dp_variant_cost(c, cluster, e3, {loom::DpCollectives::flat, loom::GradCompression::int8, 1}).allowed);
  for (const auto& v : dp_variants(c, cluster, e3)) CHECK(v.variant.compression == loom::GradCompression::none);
  // bf16 and int8 go all-to-all (every rank at once, flat) and then all-gather the sums.
  CHECK(int8.seconds == Approx(all_to_all_time(int8.payload_bytes, 8, 1e-5, 1e-9) +
                               ring_all_gather_time(int8.payload_bytes, 8, 1e-5, 1e-9)));
  // One NIC per node (inter_node_nic: shared, the bandwidth each GPU's share when all talk): the
  // flat ring's one flow per group out of a node gets L shares; two levels send from every rank.
  ClusterSpec shared = cluster;
  shared.inter_nic_shared = true;
  const auto es = estimate_layout(c, shared, l);
  const auto flat_shared = dp_variant_cost(c, shared, es, {loom::DpCollectives::flat, loom::GradCompression::none, 1});
  const auto two_shared =
      dp_variant_cost(c, shared, es, {loom::DpCollectives::hierarchical, loom::GradCompression::none, 1});
  CHECK(flat_shared.seconds == Approx(ring_all_reduce_time(S, 8, 1e-5, 1e-9 / 4)));
  CHECK(flat_shared.seconds == Approx(es.dp_s));
  CHECK(two_shared.seconds == Approx(two.seconds));
  // The fastest reduction at ZeRO 0 here: hierarchical, with the fewest bytes (PowerSGD's).
  const auto all = dp_variants(c, cluster, e);
  REQUIRE(all.size() == 8);
  CHECK(all.front().variant.collectives == loom::DpCollectives::hierarchical);
  CHECK(all.front().variant.compression == loom::GradCompression::powersgd);
  for (const auto& v : all) CHECK(v.step_s >= all.front().step_s);
}

TEST_CASE("the cost model holds num_experts / ep of each MoE block's experts per rank", "[plan][moe]") {
  // Qwen3-30B-A3B at dp 64: 48 blocks of 128 experts of 4,718,592 parameters. At ep 8 a rank holds
  // 16 of each block's experts, whose state shards over the 8 ranks of its expert-dp group.
  const loom::Config c = loom::load_config(std::string(LOOM_SOURCE_DIR) + "/configs/qwen3_30b_a3b.yaml", {});
  ClusterSpec cluster;
  cluster.gpus_per_node = 8;
  cluster.nodes = 8;
  cluster.memory_bytes = 1e15;
  Layout l;
  l.dp = 64;
  l.zero_stage = 1;
  Layout at_ep = l;
  at_ep.ep = 8;
  const auto one = estimate_layout(c, cluster, l), eight = estimate_layout(c, cluster, at_ep);
  const double expert = 4718592.0, all_experts = 48.0 * 128 * expert;
  CHECK(one.parameters_per_rank == Approx(parameters_per_rank(c, 1, 1)));  // ep 1: every expert, as counted
  CHECK(one.parameters_per_rank - eight.parameters_per_rank == Approx(all_experts - 48.0 * 16 * expert));
  // ZeRO-1 in bf16 as loom holds it (2 B parameters, 4 B fp32 gradients and 4 B masters kept, 8 B of
  // Adam's moments sharded): the dense part over 64 ranks, the experts over 8.
  const double dense = eight.parameters_per_rank - 48.0 * 16 * expert;
  CHECK(eight.state_bytes == Approx(dense * (10 + 8.0 / 64) + 48.0 * 16 * expert * (10 + 8.0 / 8)));
  // The experts' gradients go round their expert-dp ring of 8, beside the dense ones round dp's 64:
  // reduce-scattered as the fp32 masters', and the updated fp32 shards gathered.
  bool expert_ring = false;
  for (const auto& t : eight.traffic) {
    if (t.group != "expert-dp") continue;
    expert_ring = true;
    CHECK(t.bytes == Approx(2.0 * 7 / 8 * 48.0 * 16 * expert * 4));
  }
  CHECK(expert_ring);
}
