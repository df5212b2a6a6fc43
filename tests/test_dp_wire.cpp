// `loom plan`'s data-parallel bytes against what the trainer issues: the cost model's dp traffic
// (launch/layout_cost.h, launch/dp_passes.h) equals the sum over models/gpt_traffic.cpp's calls,
// which the traffic tests hold equal to the run's own counters, at every ZeRO stage, in fp32 and
// bf16, with the gradients reduced in fp32 or bf16, and at one or several micro-batches a step.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "launch/layout_cost.h"
#include "models/gpt_traffic.h"
#include "parallel/rank_grid.h"

using namespace loom;

namespace {

// A small GPT: 4 blocks of hidden 128 and a vocabulary of 512.
Config small_gpt(int64_t zero_stage, TrainPrecision precision, GradReduceDtype reduce, int64_t micro_batches,
                 int64_t dp) {
  Config c;
  c.model.num_layers = 4;
  c.model.hidden_size = 128;
  c.model.num_heads = 4;
  c.model.vocab_size = 512;
  c.model.seq_len = 32;
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 2 * micro_batches * dp;
  c.train.precision = precision;
  c.parallel.zero_stage = zero_stage;
  c.parallel.grad_reduce_dtype = reduce;
  resolve_model_defaults(c);
  resolve_and_validate(c, dp);
  return c;
}

// Bytes dp rank 0 sends per step by the trainer's calls: a ring all-reduce sends 2(P-1)/P of its
// payload, a reduce-scatter or an all-gather (P-1)/P.
double counted_dp_wire(const Config& c) {
  parallel::RankCoords coords;
  const double p = static_cast<double>(c.parallel.dp), share = (p - 1) / p;
  double wire = 0;
  for (const auto& [key, traffic] : models::predict_gpt_step_traffic(c, coords)) {
    if (key.first != "dp") continue;
    const double factor = key.second == "all_reduce" ? 2.0 : 1.0;
    CHECK((key.second == "all_reduce" || key.second == "reduce_scatter" || key.second == "all_gather"));
    wire += factor * share * static_cast<double>(traffic.bytes);
  }
  return wire;
}

double planned_dp_wire(const Config& c) {
  parallel::ClusterSpec cluster;
  cluster.memory_bytes = 1e15;
  const auto e = launch::estimate_layout(c, cluster, launch::layout_of(c));
  double wire = 0;
  for (const auto& t : e.traffic) wire += t.group == "dp" ? t.bytes : 0.0;
  return wire;
}

}  // namespace

TEST_CASE("the plan's dp bytes are the trainer's at every ZeRO stage, precision and micro-batch count", "[plan]") {
  for (int64_t dp : {2, 4}) {
    for (int64_t micro_batches : {1, 4}) {
      for (int64_t zero = 0; zero <= 3; ++zero) {
        for (auto precision : {TrainPrecision::fp32, TrainPrecision::bf16}) {
          for (auto reduce : {GradReduceDtype::fp32, GradReduceDtype::bf16}) {
            if (zero >= 2 && reduce == GradReduceDtype::bf16) continue;  // refused: stages 2 and 3 reduce in fp32
            const Config c = small_gpt(zero, precision, reduce, micro_batches, dp);
            INFO("dp " << dp << ", " << micro_batches << " micro-batches, ZeRO-" << zero << ", " << to_string(precision)
                       << ", gradients reduced in " << to_string(reduce));
            const double counted = counted_dp_wire(c);
            REQUIRE(counted > 0);
            // The plan counts whole parameters; the trainer also sums the loss and the gradient
            // norm's shards (8 bytes each) and pads each ZeRO unit to equal shards (none here).
            CHECK(planned_dp_wire(c) == Approx(counted).epsilon(1e-4));
          }
        }
      }
    }
  }
}
