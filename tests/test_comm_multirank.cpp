// Collectives on real processes. Launched by ctest under mpirun and torchrun;
// each rank runs every test case, and mpirun/torchrun fail if any rank fails.
#define CATCH_CONFIG_RUNNER
#include <atomic>
#include <catch2/catch.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "core/errors.h"
#include "multirank_world.h"
#include "parallel/hierarchical_communicator.h"
#include "parallel/hsdp_communicator.h"
#include "parallel/rank_work.h"
#include "parallel/ring_all_reduce_scope.h"

using namespace loom::parallel;

namespace {

using World = loom::test::MultiRankWorld;
World* g_world = nullptr;  // set once in main, before any test runs

}  // namespace

// Whether HANDLE completes with nobody waiting for it, polled for up to a minute (a bound for a
// failure only: a call on tiny tensors completes in milliseconds).
bool turns_ready(const CommHandle& handle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!handle.ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_CASE("all_reduce sums, maxes and mins across the world", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int n = comm.size(), r = comm.rank();
  auto t = torch::full({5}, static_cast<float>(r + 1));
  comm.all_reduce(t).wait();
  CHECK(torch::allclose(t, torch::full({5}, n * (n + 1) / 2.0f)));
  auto m = torch::tensor({static_cast<float>(r), static_cast<float>(-r)});
  comm.all_reduce(m, ReduceOp::max).wait();
  CHECK(m[0].item<float>() == n - 1);
  CHECK(m[1].item<float>() == 0);
  auto lo = torch::tensor({static_cast<double>(r)});
  comm.all_reduce(lo, ReduceOp::min).wait();
  CHECK(lo.item<double>() == 0);
}

TEST_CASE("ranks wait for each other's work together, and all learn of a failure alike", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int last = comm.size() - 1;
  const WaitBound bound{std::chrono::seconds(60), "checkpoint.timeout_s", "waits on files"};
  // The last rank's work outlasts many meetings; every rank returns once it is done (started together,
  // none can return in less than most of its 200 ms).
  comm.barrier().wait();
  const auto start = std::chrono::steady_clock::now();
  std::atomic<bool> finished{false};
  RankWork slow(comm.rank() == last ? std::function<void()>([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    finished = true;
  })
                                    : std::function<void()>());
  wait_for_every_rank(comm, slow, bound, "writing", std::chrono::milliseconds(10));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(150));
  comm.all_reduce(torch::zeros({1})).wait();  // the last rank's flag is read after every rank returned
  if (comm.rank() == last) CHECK(finished);
  // Rank 1's bad path is bad input on every rank, named there as its.
  RankWork refused(comm.rank() == 1 ? std::function<void()>([] { throw loom::InputError("no permission"); })
                                    : std::function<void()>());
  try {
    wait_for_every_rank(comm, refused, bound, "writing checkpoint step_3", std::chrono::milliseconds(10));
    FAIL("no error");
  } catch (const loom::InputError& e) {
    CHECK(std::string(e.what()) == (comm.rank() == 1 ? "writing checkpoint step_3 failed on this rank: no permission"
                                                     : "writing checkpoint step_3 failed on rank 1 (see its error)"));
  }
}

TEST_CASE("all_gather stacks every rank's input in rank order", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int n = comm.size(), r = comm.rank();
  auto input = torch::tensor({r * 10.0f, r * 10.0f + 1});
  auto output = torch::empty({n * 2});
  comm.all_gather(output, input).wait();
  for (int k = 0; k < n; ++k) {
    CHECK(output[2 * k].item<float>() == k * 10.0f);
    CHECK(output[2 * k + 1].item<float>() == k * 10.0f + 1);
  }
}

TEST_CASE("reduce_scatter gives rank r the reduction of chunk r", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int n = comm.size(), r = comm.rank();
  // Chunk k of rank j holds (j + 1) * (k + 1), three elements each.
  auto input = torch::empty({n, 3});
  for (int k = 0; k < n; ++k) input[k].fill_(static_cast<float>((r + 1) * (k + 1)));
  auto output = torch::empty({3});
  comm.reduce_scatter(output, input).wait();
  CHECK(torch::allclose(output, torch::full({3}, static_cast<float>((r + 1) * n * (n + 1) / 2))));
  auto top = torch::empty({3});
  comm.reduce_scatter(top, input, ReduceOp::max).wait();
  CHECK(torch::allclose(top, torch::full({3}, static_cast<float>(n * (r + 1)))));
}

TEST_CASE("all_to_all moves uneven splits", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int n = comm.size(), r = comm.rank();
  // Rank r sends p + 1 rows to peer p, each row [r, p]; so it receives r + 1 rows from each peer.
  std::vector<int64_t> in_splits, out_splits;
  std::vector<torch::Tensor> rows;
  for (int p = 0; p < n; ++p) {
    in_splits.push_back(p + 1);
    out_splits.push_back(r + 1);
    for (int i = 0; i <= p; ++i) rows.push_back(torch::tensor({static_cast<float>(r), static_cast<float>(p)}));
  }
  auto input = torch::stack(rows);
  auto output = torch::empty({n * (r + 1), 2});
  comm.all_to_all(output, input, out_splits, in_splits).wait();
  for (int p = 0; p < n; ++p) {
    for (int i = 0; i <= r; ++i) {
      CHECK(output[p * (r + 1) + i][0].item<float>() == p);
      CHECK(output[p * (r + 1) + i][1].item<float>() == r);
    }
  }
}

TEST_CASE("broadcast copies the root's tensor", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int root = comm.size() - 1;
  auto t = torch::full({4}, static_cast<float>(comm.rank()));
  comm.broadcast(t, root).wait();
  CHECK(torch::allclose(t, torch::full({4}, static_cast<float>(root))));
}

TEST_CASE("batched send_recv passes a ring both ways without deadlock", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto from_prev = torch::empty({3}), from_next = torch::empty({3});
  comm.send_recv({{P2POp::send, torch::full({3}, static_cast<float>(r)), next},
                  {P2POp::send, torch::full({3}, static_cast<float>(r)), prev},
                  {P2POp::recv, from_prev, prev},
                  {P2POp::recv, from_next, next}})
      .wait();
  CHECK(from_prev[0].item<float>() == prev);
  CHECK(from_next[2].item<float>() == next);
  comm.barrier().wait();
}

TEST_CASE("each group reduces over exactly its members", "[comm]") {
  auto& groups = g_world->groups;
  for (auto kind : {GroupKind::tp, GroupKind::dp, GroupKind::pp, GroupKind::model_parallel}) {
    auto& comm = groups.get(kind);
    auto t = torch::tensor({static_cast<double>(groups.rank())});
    comm.all_reduce(t).wait();
    double expected = 0;
    for (auto member : g_world->grid.group_of(kind, groups.rank())) expected += member;
    INFO(group_kind_name(kind));
    CHECK(t.item<double>() == expected);
    CHECK(comm.ranks() == g_world->grid.group_of(kind, groups.rank()));
  }
}

TEST_CASE("every call is counted with its bytes, per group and op", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const auto before = g_world->stats->get("world", "all_reduce");
  auto t = torch::zeros({10});
  comm.all_reduce(t).wait();
  comm.all_reduce(t).wait();
  const auto after = g_world->stats->get("world", "all_reduce");
  CHECK(after.calls - before.calls == 2);
  CHECK(after.bytes - before.bytes == 2 * 10 * 4);
  CHECK(after.seconds >= before.seconds);
  const auto gathered = g_world->stats->get("world", "all_gather");
  CHECK(gathered.calls >= 1);
  CHECK(gathered.bytes == gathered.calls * comm.size() * 2 * 4);
}

// Every collective loom uses, in every dtype it sends (int8: compressed gradients) (after the counting test, which
// assumes fp32 gathers): the wheel's LibTorch runs Gloo built from sources newer than the Debian headers loom compiles
// against, so each is proven here.
TEST_CASE("every collective carries bf16, int64, double and int8 exactly", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int n = comm.size(), r = comm.rank();
  for (auto dtype : {torch::kBFloat16, torch::kLong, torch::kDouble, torch::kChar}) {
    INFO("dtype " << c10::toString(dtype));
    const auto options = torch::TensorOptions().dtype(dtype);
    auto t = torch::full({7}, r + 1, options);  // small integers: exact in bf16 too
    comm.all_reduce(t).wait();
    CHECK(t.scalar_type() == dtype);
    CHECK(torch::equal(t, torch::full({7}, n * (n + 1) / 2, options)));
    auto m = torch::full({3}, r, options);
    comm.all_reduce(m, ReduceOp::max).wait();
    CHECK(torch::equal(m, torch::full({3}, n - 1, options)));

    auto gathered = torch::empty({n * 2}, options);
    comm.all_gather(gathered, torch::tensor({r * 3, r * 3 + 1}, options)).wait();
    for (int k = 0; k < n; ++k) CHECK(gathered[2 * k + 1].item<double>() == k * 3 + 1);

    auto chunks = torch::empty({n, 2}, options);
    for (int k = 0; k < n; ++k) chunks[k].fill_(r + k);
    auto mine = torch::empty({2}, options);
    comm.reduce_scatter(mine, chunks).wait();
    CHECK(mine[0].item<double>() == n * r + n * (n - 1) / 2);  // sum over j of (j + r)

    auto input = torch::empty({n}, options);
    for (int p = 0; p < n; ++p) input[p].fill_(r * 10 + p);
    std::vector<int64_t> splits(static_cast<size_t>(n), 1);
    auto exchanged = torch::empty({n}, options);
    comm.all_to_all(exchanged, input, splits, splits).wait();
    for (int p = 0; p < n; ++p) CHECK(exchanged[p].item<double>() == p * 10 + r);

    auto b = torch::full({2}, r, options);
    comm.broadcast(b, 0).wait();
    CHECK(torch::equal(b, torch::zeros({2}, options)));

    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto received = torch::empty({4}, options);
    comm.send_recv({{P2POp::send, torch::full({4}, r, options), next}, {P2POp::recv, received, prev}}).wait();
    CHECK(torch::equal(received, torch::full({4}, prev, options)));
  }
  comm.barrier().wait();
}

// parallel.dp_collectives: hierarchical, on the world as one group cut into nodes two ways: nodes of
// consecutive ranks, and nodes of alternating ranks (whose chunks the two-level reduce-scatter and
// all-gather must reorder). An odd world has one rank per node (only the ring across nodes).
TEST_CASE("two-level collectives give the flat results and send what they count", "[comm]") {
  auto& world = g_world->groups.world_comm();
  const int n = world.size(), r = world.rank();
  if (n < 2) return;
  std::vector<int64_t> everyone(static_cast<size_t>(n));
  std::iota(everyone.begin(), everyone.end(), 0);
  for (const bool alternate : {false, true})
    for (const bool threaded : {false, true}) {  // later steps on a thread of their own, or when waited
      std::vector<int64_t> node_of_rank;
      for (int64_t k = 0; k < n; ++k) node_of_rank.push_back(n % 2 ? k : alternate ? k % 2 : k / 2);
      const GroupLevels levels = group_levels(everyone, node_of_rank);
      REQUIRE(levels.even());
      const int64_t local = static_cast<int64_t>(levels.nodes.front().size()), nodes = n / local;
      auto stats = std::make_shared<CommStats>();
      auto factory =
          make_gloo_factory(g_world->env.store(), g_world->env.single_host(), stats, std::chrono::seconds(60));
      const std::string key =
          std::string("two_level/") + (alternate ? "alternate" : "consecutive") + (threaded ? "/threaded" : "");
      size_t node = 0, place = 0;
      for (size_t k = 0; k < levels.nodes.size(); ++k)
        for (size_t j = 0; j < levels.nodes[k].size(); ++j)
          if (levels.nodes[k][j] == r) node = k, place = j;
      auto make = [&](const std::string& name, const std::vector<int>& members) -> std::unique_ptr<Communicator> {
        std::vector<int64_t> ranks(members.begin(), members.end());
        const int me = static_cast<int>(std::find(ranks.begin(), ranks.end(), r) - ranks.begin());
        if (ranks.size() == 1) return std::make_unique<SelfCommunicator>(name, r, stats);
        return factory(name, key + "/" + name, ranks, me);
      };
      std::vector<int> all_positions(everyone.begin(), everyone.end());
      auto later = [&](const std::string& name, const std::vector<int>& members) {
        return threaded ? make(name + "/later", members) : nullptr;
      };
      const std::string node_name = "node" + std::to_string(node), place_name = "place" + std::to_string(place);
      HierarchicalCommunicator comm(make("flat", all_positions), make(node_name, levels.nodes[node]),
                                    make(place_name, levels.at_place(place)), levels, stats,
                                    later(node_name, levels.nodes[node]), later(place_name, levels.at_place(place)));
      comm.stop_counting();  // the world's own counters stay as the counting test left them
      INFO((alternate ? "alternating" : "consecutive")
           << " nodes, " << local << " ranks each" << (threaded ? ", later steps on a thread" : ""));

      // all_reduce: odd lengths go through the padded copy; sums, maxes and doubles.
      for (int64_t length : {int64_t{7}, int64_t{12}, int64_t{1}}) {
        auto t = torch::arange(length, torch::kFloat) + static_cast<float>(r);
        comm.all_reduce(t).wait();
        const auto expected = torch::arange(length, torch::kFloat) * n + static_cast<float>(n * (n - 1) / 2);
        CHECK(torch::equal(t, expected));
      }
      auto top = torch::full({5}, static_cast<double>(r));
      comm.all_reduce(top, ReduceOp::max).wait();
      CHECK(torch::equal(top, torch::full({5}, static_cast<double>(n - 1))));

      // reduce_scatter: chunk k of rank j holds 100 j + k (three elements); rank r gets its own chunk's sum.
      auto chunks = torch::empty({n, 3});
      for (int k = 0; k < n; ++k) chunks[k].fill_(static_cast<float>(100 * r + k));
      auto mine = torch::empty({3});
      comm.reduce_scatter(mine, chunks).wait();
      CHECK(torch::equal(mine, torch::full({3}, static_cast<float>(100 * n * (n - 1) / 2 + n * r))));

      // all_gather: rank order, whatever the nodes.
      auto gathered = torch::empty({n * 2});
      comm.all_gather(gathered, torch::tensor({r * 10.0f, r * 10.0f + 1})).wait();
      for (int k = 0; k < n; ++k) {
        CHECK(gathered[2 * k].item<float>() == k * 10.0f);
        CHECK(gathered[2 * k + 1].item<float>() == k * 10.0f + 1);
      }
      // On a thread, a call's later steps run without the caller waiting: the handle turns ready by
      // itself (when waited, it never would). Its result is checked once waited.
      if (threaded && nodes > 1 && local > 1) {
        auto pending_sum = torch::full({6}, static_cast<float>(r));
        auto handle = comm.all_reduce(pending_sum);
        REQUIRE(turns_ready(handle));
        handle.wait();
        CHECK(torch::equal(pending_sum, torch::full({6}, static_cast<float>(n * (n - 1) / 2))));
      }
      // The other ops go through the flat group.
      auto b = torch::full({2}, static_cast<float>(r));
      comm.broadcast(b, n - 1).wait();
      CHECK(torch::equal(b, torch::full({2}, static_cast<float>(n - 1))));

      // Counted: nothing by the inner groups; by this one, what each level's ring sends to its next
      // rank: an all-reduce of 12 floats sends 2 (L-1) ceil(12/L) 4 bytes inside the node and
      // 2 (N-1) ceil(12/L) 4 / N across.
      CHECK(stats->counters().empty());
      HierarchicalCommunicator counted(
          make("flat_counted", all_positions), make("node_counted" + std::to_string(node), levels.nodes[node]),
          make("place_counted" + std::to_string(place), levels.at_place(place)), levels, stats);
      auto twelve = torch::ones({12});
      counted.all_reduce(twelve).wait();
      const int64_t share = (12 + local - 1) / local * 4;
      const auto sent = stats->sent_to_by_op().at({"flat_counted", "all_reduce"});
      const int64_t next_in_node = levels.nodes[node][(place + 1) % static_cast<size_t>(local)];
      const int64_t next_node = levels.at_place(place)[(node + 1) % static_cast<size_t>(nodes)];
      int64_t expected_total = 0;
      if (local > 1) {
        CHECK(sent.at(next_in_node) == 2 * (local - 1) * share);
        expected_total += 2 * (local - 1) * share;
      }
      if (nodes > 1) {
        CHECK(sent.at(next_node) == 2 * (nodes - 1) * share / nodes);
        expected_total += 2 * (nodes - 1) * share / nodes;
      }
      CHECK(stats->get("flat_counted", "all_reduce").sent == expected_total);
      CHECK(stats->get("flat_counted", "all_reduce").calls == 1);
      CHECK(torch::equal(twelve, torch::full({12}, static_cast<float>(n))));
    }
  world.barrier().wait();
}

// parallel.dp_shard: the world cut into shard groups of two consecutive ranks (one of one rank each
// at an odd world), replicas across them. Reductions sum over the whole world, gathers stay in the
// shard group, and each step is counted by the group it ran on.
TEST_CASE("HSDP's group reduces over every replica and gathers inside its shard group", "[comm]") {
  auto& world = g_world->groups.world_comm();
  const int n = world.size(), r = world.rank();
  if (n < 2) return;
  const int s = n % 2 ? 1 : 2, shard_index = r / s, place = r % s, replicas = n / s;
  std::shared_ptr<CommStats> stats;
  CommunicatorFactory factory;
  auto make = [&](const std::string& name, const std::string& key, std::vector<int64_t> ranks) {
    const int me = static_cast<int>(std::find(ranks.begin(), ranks.end(), r) - ranks.begin());
    if (ranks.size() == 1) return std::unique_ptr<Communicator>(std::make_unique<SelfCommunicator>(name, r, stats));
    return factory(name, "hsdp/" + key, ranks, me);
  };
  std::vector<int64_t> shard_ranks, replica_ranks;
  for (int k = 0; k < s; ++k) shard_ranks.push_back(shard_index * s + k);
  for (int k = 0; k < replicas; ++k) replica_ranks.push_back(k * s + place);
  for (const bool threaded : {true, false}) {  // later steps on a thread of their own, or when waited
    INFO((threaded ? "later steps on a thread" : "later steps when waited"));
    const std::string mode = threaded ? "threaded/" : "";
    stats = std::make_shared<CommStats>();
    factory = make_gloo_factory(g_world->env.store(), g_world->env.single_host(), stats, std::chrono::seconds(60));
    auto shard = make("dp-shard", mode + "shard" + std::to_string(shard_index), shard_ranks);
    auto replicate = make("dp-replicate", mode + "place" + std::to_string(place), replica_ranks);
    auto shard_later =
        threaded ? make("dp-shard", mode + "shard" + std::to_string(shard_index) + "/later", shard_ranks) : nullptr;
    HsdpCommunicator comm(*shard, *replicate, std::move(shard_later), stats);
    CHECK(comm.size() == s);
    CHECK(comm.rank() == place);

    // all_reduce: the sum over all n ranks, odd lengths through the padded copy.
    for (int64_t length : {int64_t{7}, int64_t{12}}) {
      auto t = torch::arange(length, torch::kFloat) + static_cast<float>(r);
      comm.all_reduce(t).wait();
      CHECK(torch::equal(t, torch::arange(length, torch::kFloat) * n + static_cast<float>(n * (n - 1) / 2)));
    }
    // reduce_scatter: chunk k of rank j holds 100 j + k; shard place p gets chunk p summed over every rank.
    auto chunks = torch::empty({s, 3});
    for (int k = 0; k < s; ++k) chunks[k].fill_(static_cast<float>(100 * r + k));
    auto mine = torch::empty({3});
    comm.reduce_scatter(mine, chunks).wait();
    CHECK(torch::equal(mine, torch::full({3}, static_cast<float>(100 * n * (n - 1) / 2 + n * place))));
    // all_gather: the shard group's members only.
    auto gathered = torch::empty({s});
    comm.all_gather(gathered, torch::tensor({static_cast<float>(r)})).wait();
    for (int k = 0; k < s; ++k) CHECK(gathered[k].item<float>() == static_cast<float>(shard_index * s + k));

    // Counted by the inner groups under their names, nothing under the wrapper's own.
    if (replicas > 1) {
      // The reduce-scatter's 3-float share across the replicas: 2 (R-1)/R of 12 bytes to the next replica.
      const auto& all_reduces = stats->get("dp-replicate", "all_reduce");
      CHECK(all_reduces.calls == 3);  // two all-reduces' shares and the reduce-scatter's
      const int64_t next_replica = replica_ranks[static_cast<size_t>((shard_index + 1) % replicas)];
      CHECK(stats->sent_to_by_op().at({"dp-replicate", "all_reduce"}).at(next_replica) == all_reduces.sent);
    }
    if (s > 1) CHECK(stats->get("dp-shard", "all_gather").calls == 3);  // two all-reduces' and the gather

    // On a thread, a reduce-scatter's replica step runs without the caller waiting (when waited, it
    // would not start), and a queue of them completes in order.
    if (threaded && replicas > 1) {
      std::vector<torch::Tensor> outputs;
      std::vector<CommHandle> handles;
      for (int call = 0; call < 3; ++call) {
        auto in = torch::full({s, 2}, static_cast<float>(r + call));
        outputs.push_back(torch::empty({2}));
        handles.push_back(comm.reduce_scatter(outputs.back(), in));
      }
      REQUIRE(turns_ready(handles.back()));
      for (int call = 0; call < 3; ++call) {
        handles[static_cast<size_t>(call)].wait();
        CHECK(torch::equal(outputs[static_cast<size_t>(call)],
                           torch::full({2}, static_cast<float>(n * (n - 1) / 2 + n * call))));
      }
    }
  }
  world.barrier().wait();
}

TEST_CASE("two levels refuse nodes holding unequal shares of a group", "[comm]") {
  const GroupLevels levels = group_levels({0, 1, 2}, {0, 0, 1});
  CHECK_FALSE(levels.even());
  CHECK(group_levels({0, 2, 1, 3}, {0, 0, 1, 1}).nodes == std::vector<std::vector<int>>{{0, 2}, {1, 3}});
}

// Gloo's communicator all-reduces and all-gathers small tensors in one all-to-all and large ones by
// Gloo's ring (the line: 256 KiB sent per rank), and the alpha-beta probe forces the ring
// (RingAllReduceScope): every dtype gives the same exact results on either path, the same on every
// rank. (Last: the byte counts of the world's group checked above assume the small calls before.)
TEST_CASE("all_reduce and all_gather are exact on both of Gloo's paths", "[comm]") {
  auto& comm = g_world->groups.world_comm();
  const int n = comm.size(), r = comm.rank();
  for (bool ring : {false, true}) {
    std::optional<RingAllReduceScope> scope;
    if (ring) scope.emplace();
    // 1000 elements take one all-to-all (at 2-4 ranks), 300000 Gloo's ring, in every dtype.
    for (int64_t numel : {int64_t{1000}, int64_t{300000}}) {
      for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble, torch::kLong}) {
        auto t = torch::arange(numel, torch::kLong).remainder(7).add(r).to(dtype);
        comm.all_reduce(t).wait();
        const auto want = torch::arange(numel, torch::kLong).remainder(7).mul(n).add(n * (n - 1) / 2);
        CHECK(torch::equal(t.to(torch::kLong), want));
        auto top = torch::full({numel}, r, torch::kLong).to(dtype);
        comm.all_reduce(top, ReduceOp::max).wait();
        CHECK(torch::equal(top.to(torch::kLong), torch::full({numel}, n - 1, torch::kLong)));
      }
      auto input = torch::full({numel}, static_cast<float>(r));
      auto output = torch::empty({numel * n});
      comm.all_gather(output, input).wait();
      CHECK(torch::equal(output, torch::arange(n, torch::kFloat).repeat_interleave(numel)));
    }
  }
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  // tp=2 when the world is even and larger than 2, so that groups of different kinds exist.
  World world([](int64_t n) -> int64_t { return n % 2 == 0 && n > 2 ? 2 : 1; });
  g_world = &world;
  const int failed = Catch::Session().run(argc, argv);
  world.groups.world_comm().barrier().wait();
  return failed == 0 ? 0 : 1;
}
