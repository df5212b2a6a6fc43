// `loom plan`'s data-parallel traffic against what the trainer issues: the cost model's bytes and
// calls over the gradient groups (launch/layout_cost.h, launch/dp_passes.h) equal the sums over
// models/gpt_traffic.cpp's calls, which the traffic tests hold equal to a run's own counters: at
// every ZeRO stage, in fp32 and bf16, gradients reduced in fp32 or bf16, one or several micro-
// batches, under tp, cp, HSDP and Muon (with multi-token prediction's modules in the root unit), and
// at pp 2 the heavier end stage's.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/config.h"
#include "launch/layout_cost.h"
#include "models/gpt_traffic.h"
#include "parallel/rank_grid.h"

using namespace loom;

namespace {

struct Case {
  int64_t zero = 0, micro_batches = 1, dp = 2, tp = 1, cp = 1, dp_shard = 0, mtp = 0, pp = 1;
  bool tie = true;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  TrainPrecision precision = TrainPrecision::fp32;
  GradReduceDtype reduce = GradReduceDtype::fp32;
  OptimizerKind optimizer = OptimizerKind::adamw;
};

// A small GPT: 4 blocks of hidden 128 and a vocabulary of 512, at the case's layout.
Config small_gpt(const Case& k) {
  Config c;
  c.model.num_layers = 4;
  c.model.hidden_size = 128;
  c.model.num_heads = 4;
  c.model.vocab_size = 512;
  c.model.seq_len = 32;
  c.model.mtp.depth = k.mtp;
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 2 * k.micro_batches * k.dp;
  c.train.precision = k.precision;
  c.train.optimizer = k.optimizer;
  c.parallel.tp = k.tp;
  c.parallel.cp = k.cp;
  c.parallel.pp = k.pp;
  c.model.tie_embeddings = k.tie;
  c.parallel.schedule = k.schedule;
  c.parallel.zero_stage = k.zero;
  c.parallel.dp_shard = k.dp_shard;
  c.parallel.grad_reduce_dtype = k.reduce;
  resolve_model_defaults(c);
  resolve_and_validate(c, k.dp * k.tp * k.cp * k.pp);
  return c;
}

struct Wire {
  double bytes = 0, calls = 0;
};

// What the rank at dp 0, tp 0 sends per step over the gradient groups by the trainer's calls: a
// ring all-reduce sends 2(P-1)/P of its payload, the rest (P-1)/P, over its own group of P.
Wire counted_at(const Config& c, const Case& k, int64_t stage) {
  parallel::RankCoords coords;
  coords.pp = stage;
  const int64_t d = k.dp * k.cp, shards = (k.dp_shard > 0 ? k.dp_shard : k.dp) * k.cp;
  const std::map<std::string, int64_t> sizes{
      {"dp", d}, {"dp-cp", d}, {"dp-shard", shards}, {"dp-replicate", d / shards}};
  Wire wire;
  for (const auto& [key, traffic] : models::predict_gpt_step_traffic(c, coords)) {
    const auto size = sizes.find(key.first);
    if (size == sizes.end()) continue;
    const double p = static_cast<double>(size->second);
    wire.bytes += (key.second == "all_reduce" ? 2.0 : 1.0) * (p - 1) / p * static_cast<double>(traffic.bytes);
    wire.calls += static_cast<double>(traffic.calls);
  }
  return wire;
}

// The most any pipeline stage's rank sends: what the plan counts.
Wire counted(const Config& c, const Case& k) {
  Wire most;
  for (int64_t s = 0; s < k.pp; ++s) {
    const Wire w = counted_at(c, k, s);
    if (w.bytes > most.bytes) most = w;
  }
  return most;
}

Wire planned(const Config& c) {
  parallel::ClusterSpec cluster;
  cluster.memory_bytes = 1e15;
  const auto e = launch::estimate_layout(c, cluster, launch::layout_of(c));
  Wire wire;
  for (const auto& t : e.traffic) wire.bytes += launch::is_gradient_group(t.group) ? t.bytes : 0.0;
  const auto& p = e.dp_passes;
  wire.calls = p.grad_calls + p.param_calls + (c.parallel.dp_shard_size() < c.parallel.dp ? p.reduction_calls : 0.0);
  return wire;
}

void check(const Case& k) {
  const Config c = small_gpt(k);
  INFO("ZeRO-" << k.zero << ", " << k.micro_batches << " micro-batches, dp " << k.dp << " tp " << k.tp << " cp " << k.cp
               << " pp " << k.pp << " tie " << k.tie << " schedule " << static_cast<int>(k.schedule) << " dp_shard "
               << k.dp_shard << ", " << to_string(k.precision) << ", reduced in " << to_string(k.reduce) << ", "
               << to_string(k.optimizer) << ", mtp " << k.mtp);
  const Wire truth = counted(c, k), plan = planned(c);
  REQUIRE(truth.bytes > 0);
  // The plan counts whole parameters; the trainer also sums the loss and the gradient norm's
  // shards (8 bytes each; calls too) and pads each ZeRO unit or bucket to equal shards.
  CHECK(plan.bytes == Approx(truth.bytes).epsilon(1e-4));
  CHECK(std::abs(plan.calls - truth.calls) <= 2);
}

}  // namespace

TEST_CASE("the plan's dp bytes are the trainer's at every ZeRO stage, precision and micro-batch count", "[plan]") {
  for (int64_t dp : {2, 4}) {
    for (int64_t micro_batches : {1, 4}) {
      for (int64_t zero = 0; zero <= 3; ++zero) {
        for (auto precision : {TrainPrecision::fp32, TrainPrecision::bf16}) {
          for (auto reduce : {GradReduceDtype::fp32, GradReduceDtype::bf16}) {
            if (zero >= 2 && reduce == GradReduceDtype::bf16) continue;  // refused: stages 2 and 3 reduce in fp32
            Case k;
            k.zero = zero, k.micro_batches = micro_batches, k.dp = dp, k.precision = precision, k.reduce = reduce;
            check(k);
          }
        }
      }
    }
  }
}

TEST_CASE("the plan's dp bytes and calls at pp 2 are the heavier end stage's", "[plan]") {
  // The first stage holds the embeddings, the last the output layer (or the word embedding's tied
  // copy) and multi-token prediction's modules; 1F1B and the split backward of zb-h1.
  for (int64_t zero = 0; zero <= 3; ++zero) {
    for (int64_t micro_batches : {2, 5}) {
      for (const bool tie : {true, false}) {
        for (int64_t mtp : {0, 1}) {
          for (auto schedule : {PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1}) {
            Case k;
            k.zero = zero, k.micro_batches = micro_batches, k.pp = 2, k.tie = tie, k.mtp = mtp, k.schedule = schedule;
            check(k);
          }
        }
      }
    }
  }
}

TEST_CASE("the plan's dp bytes and calls are the trainer's under tp, cp, HSDP and Muon", "[plan]") {
  for (int64_t zero = 0; zero <= 3; ++zero) {
    for (int64_t micro_batches : {1, 3}) {
      Case k;
      k.zero = zero, k.micro_batches = micro_batches, k.precision = TrainPrecision::bf16;
      Case at_cp = k;
      at_cp.cp = 2;
      check(at_cp);
      Case at_tp = k;
      at_tp.tp = 2;
      check(at_tp);
      for (int64_t mtp : {0, 1}) {
        Case muon = k;
        muon.optimizer = OptimizerKind::muon, muon.mtp = mtp;
        check(muon);
      }
      if (zero == 0) continue;  // HSDP shards ZeRO's state
      Case hsdp = k;
      hsdp.dp = 4, hsdp.dp_shard = 2;
      check(hsdp);
      hsdp.optimizer = OptimizerKind::muon;
      check(hsdp);
    }
  }
}
