// Every gradient synchronisation (bucketed at ZeRO 0 and 1, unit-sharded at 2
// and 3) on real processes, all ranks one dp group (run at dp = 2 and 3: 3
// pads the shards). Each rank feeds its own micro-batches; the global norm must
// equal the one computed by hand from the mean gradient over all ranks, the
// first AdamW step must move each parameter by lr against that gradient's
// sign, and two steps must leave every stage with stage 0's parameters.
#define CATCH_CONFIG_RUNNER
#include <ATen/CPUGeneratorImpl.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "check_close.h"
#include "multirank_world.h"
#include "optim/make_adamw.h"
#include "parallel/grad_compression.h"
#include "parallel/gradient_sync.h"

using namespace loom;
using loom::test::check_close;
using parallel::GradientSyncOptions;
using parallel::ParallelParameter;

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

test::MultiRankWorld* g_world = nullptr;  // set once in main
constexpr int64_t kMicroBatches = 2;
constexpr double kLr = 0.01;

// A root unit (the embedding) and two blocks, named as the unit-sharded sync finds blocks.
const std::vector<std::string> kNames = {"wte.weight", "h.0.w", "h.0.b", "h.1.w"};
const std::vector<int64_t> kBlockOf = {-1, 0, 0, 1};  // the block (ZeRO-3 unit) of each; -1: the root unit

std::vector<torch::Tensor> initial_weights() {
  return {torch::linspace(-1, 1, 12).reshape({4, 3}), torch::linspace(0.5, -0.7, 9).reshape({3, 3}),
          torch::tensor({0.1f, -0.2f, 0.3f}), torch::linspace(-0.9, 1.1, 9).reshape({3, 3})};
}

// Micro-batch MICRO of rank RANK: input and target, the same wherever it is drawn.
std::pair<torch::Tensor, torch::Tensor> batch(int64_t rank, int64_t micro) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + 10 * rank + micro);
  auto x = torch::randn({2, 4}, generator);
  return {x, torch::randn({2, 3}, generator)};
}

// x -> embedding -> block 0: tanh(h w0 + b0) -> block 1: h w1 -> sum(h * target), times 2 (the
// "loss scale" that unscale(0.5) takes off). Blocks run through the units when there are any.
torch::Tensor loss_of(const std::vector<torch::Tensor>& p, int64_t rank, int64_t micro,
                      parallel::FullyShardedParameters* units) {
  const auto [x, target] = batch(rank, micro);
  const auto h = x.to(p[0].scalar_type()).matmul(p[0]);
  std::function<torch::Tensor()> block0 = [h, p] { return torch::tanh(h.matmul(p[1]) + p[2]); };
  const auto h0 = units ? units->run(0, block0) : block0();
  std::function<torch::Tensor()> block1 = [h0, p] { return h0.matmul(p[3]); };
  const auto h1 = units ? units->run(1, block1) : block1();
  return (h1.to(torch::kFloat) * target).sum() * 2;
}

// The mean over all ranks of each rank's gradient summed over its micro-batches, computed
// plainly at the whole weights CURRENT (fp32), with the model in DTYPE.
std::vector<torch::Tensor> mean_gradient(const std::vector<torch::Tensor>& current, torch::ScalarType dtype,
                                         int64_t world) {
  std::vector<torch::Tensor> sum;
  for (const auto& w : current) sum.push_back(torch::zeros_like(w));
  for (int64_t rank = 0; rank < world; ++rank) {
    for (int64_t micro = 0; micro < kMicroBatches; ++micro) {
      std::vector<torch::Tensor> leaves;
      for (const auto& w : current) leaves.push_back(w.to(dtype).detach().requires_grad_(true));
      loss_of(leaves, rank, micro, nullptr).backward();
      for (size_t i = 0; i < leaves.size(); ++i) sum[i] += leaves[i].grad().to(torch::kFloat) / 2;
    }
  }
  for (auto& s : sum) s /= static_cast<double>(world);
  return sum;
}

// Every weight whole in fp32 (the masters under mixed precision), as checkpoints read them.
std::vector<torch::Tensor> whole_weights(parallel::GradientSync& sync) {
  sync.gather_all();
  std::vector<torch::Tensor> out;
  for (const auto& p : sync.parameters()) out.push_back(p.tensor.detach().to(torch::kFloat).clone());
  sync.release_all(false);
  return out;
}

// Two steps at ZERO_STAGE with the model in DTYPE; returns the whole weights after them.
std::vector<torch::Tensor> train_two_steps(int64_t zero_stage, torch::ScalarType dtype) {
  auto& groups = g_world->groups;
  const int64_t world = groups.dp().size(), rank = groups.dp().rank();
  GradientSyncOptions options;
  options.zero_stage = zero_stage;
  options.model_dtype = dtype;
  options.micro_batches = kMicroBatches;
  options.bucket_bytes = 40;  // several buckets, each padded to a multiple of dp at stage 1
  auto sync = parallel::make_gradient_sync(groups, options);
  CHECK((sync->units() != nullptr) == (zero_stage >= 2));

  std::vector<torch::Tensor> model;
  std::vector<ParallelParameter> params;
  for (size_t i = 0; i < kNames.size(); ++i) {
    model.push_back(initial_weights()[i].requires_grad_(true));
    params.push_back({kNames[i], model.back()});
  }
  sync->attach(params, {}, kBlockOf);
  for (const auto& p : sync->parameters()) CHECK(p.tensor.scalar_type() == torch::kFloat);
  auto optimizer = optim::make_adamw(*sync, {});

  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const auto current = whole_weights(*sync);
    if (step == 0) {
      for (size_t i = 0; i < current.size(); ++i) CHECK(torch::equal(current[i], initial_weights()[i]));
    }
    const auto expected = mean_gradient(current, dtype, world);
    double sum_sq = 0;
    for (const auto& g : expected) sum_sq += g.to(torch::kDouble).pow(2).sum().item<double>();
    const double norm = std::sqrt(sum_sq);

    optimizer->zero_grad();  // as the trainer does before each step
    sync->start_step();
    for (int64_t micro = 0; micro < kMicroBatches; ++micro) loss_of(model, rank, micro, sync->units()).backward();
    sync->finish_backward();
    sync->unscale(0.5);
    CHECK(sync->clip(norm / 2) == Approx(norm).epsilon(1e-5));
    CHECK(sync->clip(0.0) == Approx(norm / 2).epsilon(1e-5));  // clipped
    optimizer->step(kLr);
    sync->after_update();

    const auto after = whole_weights(*sync);
    if (step == 0) {
      // AdamW's first step: m / sqrt(v) = g / |g|, whatever the clipping.
      for (size_t i = 0; i < after.size(); ++i) {
        check_close(after[i], current[i] - kLr * torch::sign(expected[i]), "first step of " + kNames[i], 1e-5);
      }
    }
    if (zero_stage < 3) {
      // The model computes with the updated weights (rounded to its dtype); ZeRO-3 holds none between steps.
      for (size_t i = 0; i < model.size(); ++i) {
        INFO(kNames[i]);
        CHECK(model[i].scalar_type() == dtype);
        CHECK(torch::equal(model[i].detach(), after[i].to(dtype)));
      }
    }
  }
  return whole_weights(*sync);
}

}  // namespace

TEST_CASE("gradient sync: every ZeRO stage gives the mean gradient's norm and stage 0's weights", "[gradient_sync]") {
  REQUIRE(g_world->groups.dp().size() > 1);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO("model dtype " << dtype);
    const auto reference = train_two_steps(0, dtype);
    for (int64_t stage = 1; stage <= 3; ++stage) {
      INFO("zero stage " << stage);
      const auto weights = train_two_steps(stage, dtype);
      for (size_t i = 0; i < weights.size(); ++i) check_close(weights[i], reference[i], kNames[i], 1e-6);
    }
  }
}

// parallel.grad_compression on one bucket of two matrices and a vector: each compression's sum
// against the exact one within what it loses, PowerSGD at full rank exact, error feedback holding
// exactly what was lost, and the payload bytes each puts on the wire.
TEST_CASE("compressed bucket reductions: bf16, int8 and PowerSGD against the exact sum", "[gradient_sync]") {
  auto& comm = g_world->groups.dp();
  const int ranks = comm.size(), r = comm.rank();
  const std::vector<parallel::BucketSlot> slots = {{0, {6, 5}}, {30, {7}}, {37, {4, 3}}, {49, {3, 7}}};
  const int64_t numel = 70;
  auto local = [](int rank) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(50 + rank);
    return torch::randn({numel}, generator);
  };
  auto exact = torch::zeros({numel});
  for (int k = 0; k < ranks; ++k) exact += local(k);
  const double largest = exact.abs().max().item<double>();
  auto stats = g_world->stats;
  struct Case {
    loom::GradCompression kind;
    int64_t rank;
  };
  for (const Case c : {Case{loom::GradCompression::bf16, 1}, Case{loom::GradCompression::int8, 1},
                       Case{loom::GradCompression::powersgd, 5}, Case{loom::GradCompression::powersgd, 1}}) {
    INFO("kind " << static_cast<int>(c.kind) << " rank " << c.rank);
    parallel::GradCompressionOptions options;
    options.kind = c.kind;
    options.powersgd_rank = c.rank;
    options.powersgd_start_step = 0;
    options.int8_block = 8;
    parallel::BucketCompressor compressor(options, slots, ranks);
    auto buffer = local(r);
    stats->reset();
    compressor.start(buffer, comm)();
    compressor.end_step(true);
    const auto error = compressor.state()[1];
    const auto counters = stats->counters();
    const auto bytes = [&](const std::string& op) {
      auto it = counters.find({comm.name(), op});
      return it == counters.end() ? int64_t{0} : it->second.bytes;
    };
    if (c.kind == loom::GradCompression::bf16) {
      // bf16 keeps 8 bits: each rank's rounding, then the fp32 sum's, 2^-9 of their size each.
      CHECK((buffer - exact).abs().max().item<double>() <= (ranks * 4.0 + largest) / 256);
      CHECK(torch::allclose(error, local(r) - local(r).to(torch::kBFloat16).to(torch::kFloat)));
      const int64_t padded = (numel + ranks - 1) / ranks * ranks;
      CHECK(bytes("all_gather") == padded * 2);
      CHECK(bytes("all_to_all") == (ranks - 1) * padded / ranks * 2);
    } else if (c.kind == loom::GradCompression::int8) {
      // Half a step of each rank's scale, then half a step of the sum's.
      CHECK((buffer - exact).abs().max().item<double>() <= (ranks * 4.0 + largest) / 127);
      CHECK(error.abs().max().item<double>() <= local(r).abs().max().item<double>() / 254 + 1e-6);
      // 8-element blocks, whole blocks per rank: 49 padded to 8 x ranks per chunk.
      const int64_t padded = (numel + 8 * ranks - 1) / (8 * ranks) * 8 * ranks;
      CHECK(bytes("all_gather") == padded + padded / 8 * 4);
    } else {
      const int64_t r1 = std::min<int64_t>(c.rank, 5), r2 = std::min<int64_t>(c.rank, 3);
      // The payload: P (n x r) and Q (m x r) of each matrix, and the vector, in fp32.
      CHECK(bytes("all_reduce") == ((6 + 5) * r1 + (4 + 3) * r2 + (3 + 7) * r2 + 7) * 4);
      CHECK(torch::allclose(buffer.narrow(0, 30, 7), exact.narrow(0, 30, 7), 1e-6, 1e-6));
      if (c.rank >= 5) {
        // Full rank: P Q^T is the sum itself.
        CHECK(torch::allclose(buffer, exact, 1e-4, 1e-4));
      } else {
        CHECK_FALSE(torch::allclose(buffer, exact, 1e-2, 1e-2));
      }
      // The errors summed over the ranks are what the sum lost (PyTorch's hook's, summed: each
      // rank's input minus the average), on the matrices.
      auto lost_sum = error.clone();
      comm.all_reduce(lost_sum).wait();
      auto lost = exact - buffer;
      lost.narrow(0, 30, 7).zero_();
      CHECK(torch::allclose(lost_sum, lost, 1e-4, 1e-5));
    }
    // A step the trainer skips (an fp16 overflow anywhere: here rank 0's gradient alone) leaves the
    // error and Q as they were, on every rank.
    const auto before = compressor.state();
    auto overflowed = local(r);
    if (r == 0) overflowed[3] = std::numeric_limits<float>::infinity();
    compressor.start(overflowed, comm)();
    compressor.end_step(false);
    const auto after = compressor.state();
    for (size_t i = 1; i < before.size(); ++i) CHECK(torch::equal(after[i], before[i]));
    // The state survives a checkpoint's bytes (flat: set_state gives Q its shape back).
    const auto state = compressor.state();
    const auto back = parallel::unpack_tensors(parallel::pack_tensors(state));
    REQUIRE(back.size() == state.size());
    for (size_t i = 0; i < state.size(); ++i) CHECK(torch::equal(back[i], state[i].reshape({-1})));
  }
}

// A parameter with a copy in another bucket (tp-replicated, the tied embedding of the first and last
// stages) is reduced to the same values in both: int8 in blocks of its own (a block shared with a
// neighbour scales it by the neighbour's absmax), PowerSGD from a first Q of the parameter's key.
TEST_CASE("a parameter's copies in two buckets are reduced alike", "[gradient_sync]") {
  auto& comm = g_world->groups.dp();
  const int ranks = comm.size(), r = comm.rank();
  if (ranks < 2) return;
  const auto mine = torch::randn({12}, at::make_generator<at::CPUGeneratorImpl>(70 + r));
  const auto neighbour = [&](int seed) {
    return torch::randn({5}, at::make_generator<at::CPUGeneratorImpl>(seed)) * 40;
  };
  const uint64_t key = parallel::parameter_key(mine.view({4, 3}));
  for (const auto kind : {loom::GradCompression::int8, loom::GradCompression::powersgd}) {
    for (const bool per_parameter : {true, false}) {
      INFO("kind " << static_cast<int>(kind) << " blocks per parameter " << per_parameter);
      parallel::GradCompressionOptions options;
      options.kind = kind;
      options.powersgd_start_step = 0;
      options.int8_block = 8;
      options.int8_blocks_per_parameter = per_parameter;
      // Bucket A: the parameter, then a vector; bucket B: another vector, then the parameter.
      parallel::BucketCompressor a(options, {{0, {4, 3}, key}, {12, {5}, 1}}, ranks);
      parallel::BucketCompressor b(options, {{0, {5}, 2}, {5, {4, 3}, key}}, ranks);
      auto in_a = torch::cat({mine, neighbour(80 + r)}), in_b = torch::cat({neighbour(90 + r) * 3, mine});
      a.start(in_a, comm)();
      b.start(in_b, comm)();
      a.end_step(true);
      b.end_step(true);
      const bool alike = torch::equal(in_a.narrow(0, 0, 12), in_b.narrow(0, 5, 12));
      if (kind == loom::GradCompression::powersgd || per_parameter) {
        CHECK(alike);
      } else {
        CHECK_FALSE(alike);  // (what blocks of their own are for)
      }
    }
  }
}

// A step whose summed gradient is zero (an MoE expert no rank routed to) leaves PowerSGD's Q zero;
// kept so (Gram-Schmidt, ranks 1 and 2, keeps a zero column zero), every later P = M Q would be
// zero and the matrix would never send its gradient again. The step after must give the exact sum:
// at rank 2 of a 2 x 5 matrix, and at rank 1 of a sum of rank 1 (every rank's a multiple of u v^T).
TEST_CASE("PowerSGD goes on after a step whose gradient was zero", "[gradient_sync]") {
  auto& comm = g_world->groups.dp();
  const int ranks = comm.size(), r = comm.rank();
  if (ranks < 2) return;  // (one rank reduces nothing)
  for (int64_t rank_of_p : {1, 2}) {
    INFO("PowerSGD rank " << rank_of_p);
    parallel::GradCompressionOptions options;
    options.kind = loom::GradCompression::powersgd;
    options.powersgd_rank = rank_of_p;
    options.powersgd_start_step = 0;
    const int64_t n = rank_of_p == 1 ? 4 : 2, m = 5;
    parallel::BucketCompressor compressor(options, {{0, {n, m}}}, ranks);
    auto zero = torch::zeros({n * m});
    compressor.start(zero, comm)();
    compressor.end_step(true);
    CHECK(zero.abs().max().item<double>() == 0.0);
    auto shared = at::make_generator<at::CPUGeneratorImpl>(300);
    auto buffer = rank_of_p == 1 ? (torch::randn({n, 1}, shared).mm(torch::randn({1, m}, shared)) * (r + 1)).view({-1})
                                 : torch::randn({n * m}, at::make_generator<at::CPUGeneratorImpl>(310 + r));
    auto exact = buffer.clone();
    comm.all_reduce(exact).wait();
    compressor.start(buffer, comm)();
    compressor.end_step(true);
    check_close(buffer, exact, "the step after a zero one", 1e-4);
  }
}

// PowerSGD step by step beside PyTorch's own hook (tests/scripts/powersgd_reference.sh runs this
// hidden case under mpirun, then tests/scripts/powersgd_reference.py the hook on the same inputs):
// this rank's gradient of each step, the mean each step delivers, and the first Q of every matrix,
// written as a list of tensors to $LOOM_POWERSGD_DUMP/rank_R.pt for torch.load.
TEST_CASE("PowerSGD's steps, written for PyTorch's hook to replay", "[.powersgd_reference]") {
  const char* dump = std::getenv("LOOM_POWERSGD_DUMP");
  REQUIRE(dump != nullptr);
  auto& comm = g_world->groups.dp();
  const int ranks = comm.size(), r = comm.rank();
  // Matrices of distinct shapes (the hook's bucket order is the slots'), a 3-d one seen as its
  // first dimension by the rest, and vectors between them.
  const std::vector<parallel::BucketSlot> slots = {{0, {12, 9}},      {108, {7}}, {115, {5, 16}},
                                                   {195, {10, 3, 2}}, {255, {4}}, {259, {8, 6}}};
  const int64_t numel = 307, steps = 8;
  for (int64_t rank_of_p : {1, 3}) {
    parallel::GradCompressionOptions options;
    options.kind = loom::GradCompression::powersgd;
    options.powersgd_rank = rank_of_p;
    options.powersgd_start_step = 2;
    options.seed = 17;
    parallel::BucketCompressor compressor(options, slots, ranks);
    c10::List<torch::Tensor> out;
    const auto first = compressor.state();  // count, error, then each slot's Q (empty for vectors)
    for (size_t k = 2; k < first.size(); ++k) out.push_back(first[k].clone());
    // Each matrix's gradient: as many strong directions as the rank keeps (singular values 3, 2,
    // 1.5, the same on every rank and step), plus each rank's noise. Where the kept directions are
    // not well apart from the rest, the subspace a step finds turns on rounding, and two exact
    // computations part by more each step (seen: noise alone at rank 3, 8.7e-6 after 6 steps).
    auto fixed = at::make_generator<at::CPUGeneratorImpl>(900 + rank_of_p);
    auto strong = torch::zeros({numel});
    for (const auto& slot : slots) {
      if (slot.shape.size() < 2) continue;
      const int64_t n = slot.shape.front(), m = numel_of(slot.shape) / n;
      auto u = std::get<0>(torch::linalg_qr(torch::randn({n, rank_of_p}, fixed)));
      auto v = std::get<0>(torch::linalg_qr(torch::randn({m, rank_of_p}, fixed)));
      auto s = torch::tensor({3.0f, 2.0f, 1.5f}).narrow(0, 0, rank_of_p);
      strong.narrow(0, slot.offset, n * m).copy_((u * s).mm(v.t()).view({-1}));
    }
    for (int64_t step = 0; step < steps; ++step) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(700 + 10 * r + step);
      auto gradient = strong + torch::randn({numel}, generator) * 0.05;
      auto buffer = gradient.clone();
      compressor.start(buffer, comm)();
      compressor.end_step(true);
      out.push_back(gradient);
      out.push_back(buffer / ranks);
    }
    const auto bytes = torch::pickle_save(c10::IValue(out));
    const auto path = std::string(dump) + "/rank" + std::to_string(r) + "_r" + std::to_string(rank_of_p) + ".pt";
    std::ofstream file(path, std::ios::binary);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(file.good());
  }
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  test::MultiRankWorld world([](int64_t) { return 1; });
  g_world = &world;
  const int failed = Catch::Session().run(argc, argv);
  world.groups.world_comm().barrier().wait();
  return failed == 0 ? 0 : 1;
}
