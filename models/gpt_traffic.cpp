#include "models/gpt_traffic.h"

#include <algorithm>

#include "core/muon_groups.h"
#include "core/precision.h"
#include "models/gpt_options.h"
#include "models/gpt_shapes.h"
#include "parallel/grad_buckets.h"
#include "parallel/layer_ownership.h"
#include "parallel/pipeline_schedule.h"

namespace loom::models {
namespace {

constexpr int64_t kFloat = 4, kDouble = 8;

// With context parallelism gradients are averaged (and ZeRO shards) over dp x cp: D ranks of group
// GRAD_GROUP ("dp", or "dp-cp" when cp > 1). Under HSDP (parallel.dp_shard) ZeRO shards over
// SHARDS = dp_shard x cp ranks of SHARD_GROUP ("dp-shard"; the gradient group itself without HSDP)
// and each shard's gradients are all-reduced over the replicas ("dp-replicate", dp / dp_shard ranks).
struct Layout {
  int64_t t, p, v, cp, d, shards, layers_per_piece, vocab_shard;
  bool sp, hsdp;
  std::string grad_group, shard_group;
  explicit Layout(const Config& c)
      : t(c.parallel.tp),
        p(c.parallel.pp),
        v(c.parallel.virtual_stages),
        cp(c.parallel.cp),
        d(c.parallel.dp * c.parallel.cp),
        shards(c.parallel.dp_shard_size() * c.parallel.cp),
        layers_per_piece(c.model.num_layers / (c.parallel.pp * c.parallel.virtual_stages)),
        vocab_shard((c.model.vocab_size + c.parallel.tp - 1) / c.parallel.tp),
        sp(c.parallel.sequence_parallel),
        hsdp(c.parallel.hsdp()),
        grad_group(c.parallel.cp > 1 ? "dp-cp" : "dp"),
        shard_group(hsdp ? "dp-shard" : grad_group) {}
  int64_t pieces() const { return p * v; }
};

// One parameter this rank holds, in the trainer's order (order of use).
struct LocalParameter {
  int64_t numel;
  bool tp_summed;          // its gradient is summed over tp after backward (ParallelParameter::sequence_parallel)
  int64_t block = -1;      // the layer of the block holding it; -1: outside the blocks
  bool tied_copy = false;  // the word embedding held by the first and last pipeline pieces both
};

// Calls ADD(shapes, block) for the parameters this rank holds, in the trainer's order (order of
// use): its pipeline pieces' input stage, blocks (BLOCK: their layer) and output stage (-1).
template <typename Add>
void for_each_local_shape(const Config& c, const parallel::RankCoords& coords, Add add) {
  const Layout l(c);
  for (int64_t chunk = 0; chunk < l.v; ++chunk) {
    const int64_t k = chunk * l.p + coords.pp;
    if (k == 0) add(gpt_input_parameters(c), -1);
    for (int64_t layer = k * l.layers_per_piece; layer < (k + 1) * l.layers_per_piece; ++layer)
      add(gpt_block_parameters(c, layer), layer);
    if (k == l.pieces() - 1) {
      // A last piece that is not the first holds its own copy of a tied word embedding, ahead of the output stage.
      if (k != 0 && shares_word_embedding(c)) add({gpt_input_parameters(c).front()}, -1);
      add(gpt_output_parameters(c), -1);
    }
  }
}

std::vector<LocalParameter> local_parameters(const Config& c, const parallel::RankCoords& coords) {
  const Layout l(c);
  const bool copies = l.pieces() > 1 && shares_word_embedding(c);
  const std::string embedding = gpt_input_parameters(c).front().name;
  std::vector<LocalParameter> out;
  for_each_local_shape(c, coords, [&](const std::vector<ParameterShape>& shapes, int64_t block) {
    for (const auto& s : shapes)
      out.push_back({s.local_numel(l.t), s.tp_summed, block, copies && block < 0 && s.name == embedding});
  });
  return out;
}

// This rank's gradient buckets as the trainer packs them (the tied copy in a bucket of its own);
// BYTES: each parameter's fp32 gradient bytes.
std::vector<std::vector<size_t>> local_gradient_buckets(const Config& c, const parallel::RankCoords& coords,
                                                        std::vector<int64_t>& bytes) {
  std::vector<bool> alone;
  for (const auto& p : local_parameters(c, coords)) {
    bytes.push_back(p.numel * kFloat);
    alone.push_back(p.tied_copy);
  }
  return parallel::GradientBuckets::plan(bytes, static_cast<int64_t>(c.parallel.bucket_mb * 1024 * 1024), alone);
}

}  // namespace

std::vector<int64_t> gpt_local_parameter_sizes(const Config& c, const parallel::RankCoords& coords) {
  std::vector<int64_t> sizes;
  for (const auto& p : local_parameters(c, coords)) sizes.push_back(p.numel);
  return sizes;
}

namespace {

// ZeRO-3's units on this rank (parallel/fully_sharded.h): the root (every
// parameter outside the blocks, in order) first, then one per block; the
// sizes of their parameters and which are summed over tp.
struct ShardedUnit {
  bool root = false;
  int64_t block = -1;  // the layer of its block; -1: the root
  std::vector<int64_t> sizes;
  std::vector<bool> tp_summed;
  int64_t numel() const {
    int64_t n = 0;
    for (int64_t s : sizes) n += s;
    return n;
  }
};

std::vector<ShardedUnit> gpt_sharded_units(const Config& c, const parallel::RankCoords& coords) {
  std::vector<ShardedUnit> units(1);
  units[0].root = true;
  int64_t block = -1;
  for (const auto& p : local_parameters(c, coords)) {
    if (p.block >= 0 && p.block != block) {
      units.emplace_back();
      units.back().block = p.block;
    }
    block = p.block >= 0 ? p.block : block;
    auto& unit = p.block >= 0 ? units.back() : units[0];
    unit.sizes.push_back(p.numel);
    unit.tp_summed.push_back(p.tp_summed);
  }
  if (units[0].sizes.empty()) units.erase(units.begin());
  return units;
}

// ZeRO-2 and 3 shard unit by unit (launch/trainer.cpp).
bool works_by_units(const Config& c) {
  const auto& p = c.parallel;
  return p.zero_stage >= 2;
}

// Elements of the tp-summed parameters inside this dp rank's shard of UNIT.
int64_t tp_summed_in_shard(const ShardedUnit& unit, int64_t d, int64_t dp_rank) {
  const int64_t shard = (unit.numel() + d - 1) / d, lo = shard * dp_rank, hi = lo + shard;
  int64_t offset = 0, count = 0;
  for (size_t j = 0; j < unit.sizes.size(); ++j) {
    if (unit.tp_summed[j]) count += std::max<int64_t>(0, std::min(hi, offset + unit.sizes[j]) - std::max(lo, offset));
    offset += unit.sizes[j];
  }
  return count;
}

// Muon's weights on this rank (train.optimizer muon: the blocks' 2-D weights), in the trainer's
// order, and whether this rank's dp-cp rank updates each (ZeRO's layer-wise ownership; without
// it, every rank updates every weight).
struct MuonWeight {
  ParameterShape shape;
  int64_t block = -1;  // the layer of the block holding it; -1: outside the blocks (the root unit's)
  bool owned = true;
};
std::vector<MuonWeight> muon_weights(const Config& c, const parallel::RankCoords& coords) {
  std::vector<MuonWeight> out;
  if (c.train.optimizer != OptimizerKind::muon) return out;
  const Layout l(c);
  auto ends_with = [](const std::string& name, const std::string& end) {
    return name.size() >= end.size() && name.compare(name.size() - end.size(), end.size(), end) == 0;
  };
  std::vector<double> costs;
  auto add = [&](const std::vector<ParameterShape>& shapes, int64_t block) {
    for (const auto& shape : shapes) {
      if (!muon_trains(c.train.muon, shape.name, static_cast<int64_t>(shape.shape.size()))) continue;
      const int64_t parts = ends_with(shape.name, "attn.qkv.weight")  ? 3
                            : ends_with(shape.name, "attn.kv.weight") ? 2
                                                                      : 1;
      // The shape Muon sees: the tp parts put together (a vocabulary padded to a multiple of tp).
      auto whole = shape.shape;
      if (shape.tp_split_dim >= 0) {
        auto& split = whole[static_cast<size_t>(shape.tp_split_dim)];
        split = (split + l.t - 1) / l.t * l.t;
      }
      costs.push_back(parallel::newton_schulz_cost(whole[0], whole[1], parts));
      out.push_back({shape, block});
    }
  };
  for_each_local_shape(c, coords, add);
  if (c.parallel.zero_stage >= 1 && l.d > 1) {
    const auto owner = parallel::balance_owners(costs, l.shards);
    for (size_t i = 0; i < out.size(); ++i) out[i].owned = owner[i] == coords.dp_shard;
  }
  return out;
}

}  // namespace

int64_t gpt_local_parameters(const Config& c, const parallel::RankCoords& coords) {
  int64_t total = 0;
  for (int64_t n : gpt_local_parameter_sizes(c, coords)) total += n;
  return total;
}

std::map<std::pair<std::string, std::string>, PredictedTraffic> predict_gpt_step_traffic(
    const Config& c, const parallel::RankCoords& coords) {
  const Layout l(c);
  // A rank holds S / cp tokens of each sequence (context parallelism).
  const int64_t b = c.train.micro_batch_size, s = c.model.seq_len / c.parallel.cp, h = c.model.hidden_size;
  const int64_t m = c.micro_batches_per_step();
  const auto act_bytes = static_cast<int64_t>(c10::elementSize(Precision::of(c.train.precision).activations));
  // A full [B, S, H] activation, in the dtype layers compute in (bf16 under train.precision bf16).
  const int64_t activation = b * s * h * act_bytes;
  std::map<std::pair<std::string, std::string>, PredictedTraffic> out;
  auto add = [&](const std::string& group, const std::string& op, int64_t calls, int64_t bytes_each) {
    auto& p = out[{group, op}];
    p.calls += calls;
    p.bytes += calls * bytes_each;
  };
  // ZeRO's shard group: a group of one (HSDP with dp_shard 1, cp 1) runs nothing on the wire and counts nothing.
  auto add_shard = [&](const std::string& op, int64_t calls, int64_t bytes_each) {
    if (l.shards > 1) add(l.shard_group, op, calls, bytes_each);
  };

  bool first = false, last = false;
  int64_t layers = 0, boundaries = 0;  // pipeline messages per micro-batch
  for (int64_t chunk = 0; chunk < l.v; ++chunk) {
    const int64_t k = chunk * l.p + coords.pp;
    first = first || k == 0;
    last = last || k == l.pieces() - 1;
    layers += l.layers_per_piece;
    boundaries += (k > 0 ? 1 : 0) + (k < l.pieces() - 1 ? 1 : 0);
  }

  if (l.t > 1) {
    // Each layer has two tp regions (attention, MLP), each crossed forward and
    // backward; the embedding and the output layer add one crossing each.
    // Full recomputation runs each block's forward, and its two forward crossings, again.
    const int64_t recomputed = c.train.recompute == Recompute::full ? 2 * layers : 0;
    // Each multi-token prediction module (models/mtp.h) on the last piece: its block (never
    // recomputed whole), its embedding of the shifted tokens and its logits.
    const int64_t mtp = last ? c.model.mtp.depth : 0;
    const int64_t crossings = 4 * layers + recomputed + (last ? 1 : 0) + 5 * mtp;
    // The vocab-parallel embeddings' sums (the first piece's, and each MTP module's of the shifted
    // tokens) are of the weight's dtype, before the cast to the activations' (fp16 parameters with
    // fp32 arithmetic: half an activation's bytes).
    const int64_t embeddings = (first ? 1 : 0) + mtp;
    const int64_t embedded =
        b * s * h * static_cast<int64_t>(c10::elementSize(Precision::of(c.train.precision).params));
    if (l.sp) {
      add("tp", "all_gather", m * crossings, activation);
      add("tp", "reduce_scatter", m * crossings, activation);
      if (embeddings > 0) {
        add("tp", "all_gather", m * embeddings, embedded);
        add("tp", "reduce_scatter", m * embeddings, embedded);
      }
    } else {
      add("tp", "all_reduce", m * crossings, activation);
      if (embeddings > 0) add("tp", "all_reduce", m * embeddings, embedded);
    }
    if (last) {  // the vocab-parallel loss (and each MTP module's): the max, then the exp-sum and target logit together
      add("tp", "all_reduce", m * (1 + mtp), b * s * kFloat);
      add("tp", "all_reduce", m * (1 + mtp), 2 * b * s * kFloat);
    }
    // One all-reduce of the partial gradients of tp-replicated parameters: under sequence
    // parallelism what the split sequence feeds (norms, row biases, wpe); a key/value
    // projection shared by several tp ranks (tp > kv_heads) with or without it. ZeRO-2/3
    // sums only the pieces in this rank's shards; none there, no call.
    int64_t summed = 0;
    if (l.d > 1 && works_by_units(c)) {
      for (const auto& unit : gpt_sharded_units(c, coords))
        summed += tp_summed_in_shard(unit, l.shards, coords.dp_shard);
    } else {
      for (const auto& p : local_parameters(c, coords)) summed += p.tp_summed ? p.numel : 0;
    }
    if (summed > 0) add("tp", "all_reduce", 1, summed * kFloat);
  }
  if (l.p > 1) {
    // Every send and every receive is its own call, of one activation (sequence-split with SP).
    add("pp", "send_recv", m * 2 * boundaries, activation / (l.sp ? l.t : 1));
    // The loss (and multi-token prediction's) and every stage's timing.
    add("pp", "all_gather", 1, l.p * (c.model.mtp.depth > 0 ? 4 : 3) * kDouble);
    // The tied word embedding's two copies sum their gradients; an untied lm_head has no twin.
    if ((first || last) && shares_word_embedding(c)) add("embedding", "all_reduce", 1, l.vocab_shard * h * kFloat);
  }
  if (l.d > 1 && works_by_units(c)) {
    // ZeRO-3: the root unit is gathered and reduce-scattered once per step; each
    // block is gathered for every micro-batch's forward and again for its
    // backward, and its gradients reduce-scattered after that backward.
    // ZeRO-2 (dense fp32) reduces the same way and gathers each updated unit once.
    // Parameters are gathered in the model's dtype (bf16 under mixed precision), gradients reduced in fp32.
    const bool zero3 = c.parallel.zero_stage == 3;
    const int64_t param_bytes = static_cast<int64_t>(c10::elementSize(Precision::of(c.train.precision).params));
    auto padded = [&](int64_t n) { return (n + l.shards - 1) / l.shards * l.shards; };
    // HSDP: each reduce-scatter's shard is then all-reduced over the replicas (parallel/hsdp_communicator.h).
    auto reduce_scatter = [&](int64_t calls, int64_t numel) {
      add_shard("reduce_scatter", calls, padded(numel) * kFloat);
      if (l.hsdp) add("dp-replicate", "all_reduce", calls, padded(numel) / l.shards * kFloat);
    };
    // A split backward (zb-h1) holds every unit's gradients for the step: one reduce-scatter each.
    const bool split = parallel::splits_backward(c.parallel.schedule);
    bool lowest_block = true;
    for (const auto& unit : gpt_sharded_units(c, coords)) {
      int64_t gathers = unit.root || !zero3 ? 1 : 2 * m;
      if (split && zero3 && !unit.root && lowest_block)
        gathers -= parallel::passes_after_input_backward(c.parallel.schedule, coords.pp, c.parallel.pp,
                                                         c.micro_batches_per_step());
      if (!unit.root) lowest_block = false;
      add_shard("all_gather", gathers, padded(unit.numel()) * param_bytes);
      reduce_scatter(unit.root || split ? 1 : m, unit.numel());
    }
    add_shard("all_reduce", 1, kDouble);                                            // the gradient norm's shard sums
    add(l.grad_group, "all_reduce", 1, (c.model.mtp.depth > 0 ? 2 : 1) * kDouble);  // the loss (and MTP's)
    if (c.train.optimizer == OptimizerKind::muon) {
      // Muon over the units (optim/unit_sharded_muon.h): each block's gradient shards gathered
      // whole, its owners' updates reduce-scattered back into shards (fp32 both).
      const auto weights = muon_weights(c, coords);
      for (const auto& unit : gpt_sharded_units(c, coords)) {
        // Only the units that hold Muon's weights (train.muon.include may put some in the root's).
        const bool holds =
            std::any_of(weights.begin(), weights.end(), [&](const MuonWeight& w) { return w.block == unit.block; });
        if (!holds) continue;
        add_shard("all_gather", 1, padded(unit.numel()) * kFloat);
        add_shard("reduce_scatter", 1, padded(unit.numel()) * kFloat);
      }
    }
  } else if (l.d > 1) {
    // One all-reduce per gradient bucket (parallel/grad_buckets.h); ZeRO-1 reduce-scatters each into
    // its shards instead (but for compression and Muon, which need them whole) and gathers the
    // updated shards.
    const bool to_shards = c.parallel.zero_stage > 0 && c.parallel.grad_compression == GradCompression::none &&
                           c.train.optimizer != OptimizerKind::muon;
    std::vector<int64_t> bytes;
    const int64_t zero = c.parallel.zero_stage;
    for (const auto& bucket : local_gradient_buckets(c, coords, bytes)) {
      int64_t sum = 0;
      for (size_t i : bucket) sum += bytes[i];
      if (zero > 0) sum = (sum / kFloat + l.shards - 1) / l.shards * l.shards * kFloat;  // padded to equal shards
      if (c.parallel.grad_compression == GradCompression::bf16) {
        // parallel/grad_compression.h: each rank's chunk of the bucket in bf16 to its owner (all-to-all,
        // the rank's own chunk not sent), the owners' fp32 sums gathered back in bf16.
        const int64_t chunk = (sum / kFloat + l.d - 1) / l.d;
        add(l.grad_group, "all_to_all", 1, (l.d - 1) * chunk * 2);
        add(l.grad_group, "all_gather", 1, l.d * chunk * 2);
      } else if (l.hsdp) {
        // Inside the shard group and across the replicas (parallel/hsdp_communicator.h); the bucket
        // is padded to equal shards already.
        const int64_t wire = c.parallel.grad_reduce_dtype == GradReduceDtype::bf16 ? sum / 2 : sum;
        add_shard("reduce_scatter", 1, wire);
        add("dp-replicate", "all_reduce", 1, wire / l.shards);
        if (!to_shards) add_shard("all_gather", 1, wire);
      } else {
        // Gradients are fp32 (the masters' under mixed precision), reduced in bf16 if asked.
        add(l.grad_group, to_shards ? "reduce_scatter" : "all_reduce", 1,
            c.parallel.grad_reduce_dtype == GradReduceDtype::bf16 ? sum / 2 : sum);
      }
      if (zero > 0) add_shard("all_gather", 1, sum);  // the updated (fp32) parameter shards
    }
    if (to_shards) add_shard("all_reduce", 1, kDouble);                             // the gradient norm's shard sums
    add(l.grad_group, "all_reduce", 1, (c.model.mtp.depth > 0 ? 2 : 1) * kDouble);  // the loss (and MTP's)
  }
  if (l.cp > 1 && last && c.model.mtp.depth > 0) {
    // Multi-token prediction gathers each micro-batch's targets (int64) whole over cp (models/mtp.h).
    add("cp", "all_gather", m, b * s * l.cp * static_cast<int64_t>(sizeof(int64_t)));
  }
  if (l.cp > 1) {
    // Attention over the cp group, per layer and micro-batch (parallel/ring_attention.h,
    // parallel/all_to_all_attention.h); recomputation (full or selective) runs the forward's again.
    const int64_t d = c.model.head_dim(), heads = c.model.num_heads / l.t;
    const int64_t kv = kv_heads_shared(c.model.kv_heads(), l.t) ? 1 : c.model.kv_heads() / l.t;
    const int64_t forwards = c.train.recompute == Recompute::none ? 1 : 2;
    // The passes of a layer's attention (forwards and backward) per micro-batch, summed over this
    // rank's layers and multi-token prediction's blocks (whose forward only selective recomputation repeats).
    const int64_t mtp = last ? c.model.mtp.depth : 0;
    const int64_t passes = layers * (forwards + 1) + mtp * (c.train.recompute == Recompute::selective ? 3 : 2);
    if (c.parallel.cp_comm == ContextComm::p2p) {
      // Each ring step is one call sending this rank's keys and values on and receiving the
      // previous rank's (both counted); backward also passes the fp32 key/value gradients along.
      const int64_t kv_shard = 2 * b * kv * s * d * act_bytes, dkv_shard = 2 * b * kv * s * d * kFloat;
      add("cp", "send_recv", m * passes * (l.cp - 1), 2 * kv_shard);
      add("cp", "send_recv", m * (layers + mtp) * (l.cp - 1), 2 * dkv_shard);
    } else {
      // q, k, v to heads and the context back, forward and (their gradients) backward: each all-to-all
      // sends all but this rank's 1/cp of its tensor.
      auto sent = [&](int64_t tensor_heads) { return b * tensor_heads * s * d * act_bytes / l.cp * (l.cp - 1); };
      for (int64_t tensor_heads : {heads, kv, kv, heads}) add("cp", "all_to_all", m * passes, sent(tensor_heads));
    }
  }
  if (l.t * l.p > 1) add("model-parallel", "all_reduce", 1, kDouble);  // the gradient norm
  // Muon (optim/muon.h): each weight split over tp has its fp32 update gathered whole there by the
  // ranks that update it; under ZeRO-1 each weight's owner broadcasts it over ZeRO's shard group.
  const bool owners = c.parallel.zero_stage == 1 && l.d > 1 && l.shards > 1;
  for (const auto& weight : muon_weights(c, coords)) {
    if (l.t > 1 && weight.shape.tp_split_dim >= 0 && weight.owned)
      add("tp", "all_gather", 1, l.t * weight.shape.local_numel(l.t) * kFloat);
    if (owners) add(l.shard_group, "broadcast", 1, weight.shape.local_numel(l.t) * kFloat);
  }
  return out;
}

namespace {

// ZeRO-2/3's gather of every unit whole (FullyShardedParameters::gather_all, before a checkpoint is
// read or written): with ZeRO-3 its parameters in the model's dtype, and under mixed precision its
// fp32 master weights; with MOMENTS (a save) both of the optimizer's moments too.
void add_unit_gathers(std::map<std::pair<std::string, std::string>, PredictedTraffic>& out, const Config& c,
                      const parallel::RankCoords& coords, bool moments) {
  const Layout l(c);
  const auto precision = Precision::of(c.train.precision);
  const int64_t param_bytes = static_cast<int64_t>(c10::elementSize(precision.params));
  auto& p = out[{l.shard_group, "all_gather"}];
  for (const auto& unit : gpt_sharded_units(c, coords)) {
    const int64_t padded = (unit.numel() + l.shards - 1) / l.shards * l.shards;
    if (moments) {
      p.calls += 2;
      p.bytes += 2 * padded * kFloat;
    }
    if (c.parallel.zero_stage == 3) {
      p.calls += 1;
      p.bytes += padded * param_bytes;
    }
    if (precision.mixed()) {
      p.calls += 1;
      p.bytes += padded * kFloat;
    }
  }
  if (p.calls == 0) out.erase({l.shard_group, "all_gather"});
}

}  // namespace

std::map<std::pair<std::string, std::string>, PredictedTraffic> predict_gpt_resume_traffic(
    const Config& c, const parallel::RankCoords& coords) {
  std::map<std::pair<std::string, std::string>, PredictedTraffic> out;
  const Layout l(c);
  if (l.d > 1 && l.shards > 1 && works_by_units(c)) add_unit_gathers(out, c, coords, /*moments=*/false);
  return out;
}

std::map<std::pair<std::string, std::string>, PredictedTraffic> predict_gpt_checkpoint_traffic(
    const Config& c, const parallel::RankCoords& coords) {
  std::map<std::pair<std::string, std::string>, PredictedTraffic> out;
  const Layout l(c);
  // (l.d and the group are dp x cp's under context parallelism; the gathers run over ZeRO's shard group.)
  if (l.d == 1 || c.parallel.zero_stage == 0 || l.shards == 1) return out;
  // Muon's owners send each weight's momentum before saving (layer-wise ownership).
  for (const auto& weight : muon_weights(c, coords)) {
    auto& p = out[{l.shard_group, "broadcast"}];
    p.calls += 1;
    p.bytes += weight.shape.local_numel(l.t) * kFloat;
  }
  if (works_by_units(c)) {
    add_unit_gathers(out, c, coords, /*moments=*/true);  // both moments of every unit, and gather_all's
    return out;
  }
  // A sharded optimizer gathers both moments of every bucket before saving.
  std::vector<int64_t> bytes;
  for (const auto& bucket : local_gradient_buckets(c, coords, bytes)) {
    int64_t sum = 0;
    for (size_t i : bucket) sum += bytes[i];
    sum = (sum / kFloat + l.shards - 1) / l.shards * l.shards * kFloat;
    auto& p = out[{l.shard_group, "all_gather"}];
    p.calls += 2;
    p.bytes += 2 * sum;
  }
  return out;
}

}  // namespace loom::models
