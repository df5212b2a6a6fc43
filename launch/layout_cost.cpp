#include "launch/layout_cost.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/muon_groups.h"
#include "launch/expert_plan.h"
#include "models/gpt_flops.h"
#include "models/gpt_shapes.h"

namespace loom::launch {

double model_state_bytes(double parameters, int64_t zero_stage, int64_t dp, const StateBytes& b) {
  const double d = static_cast<double>(dp);
  switch (zero_stage) {
    case 0: return parameters * (b.param + b.grad + b.optimizer);
    case 1: return parameters * (b.param + b.grad + b.optimizer / d);
    case 2: return parameters * (b.param + (b.grad + b.optimizer) / d);
    default: return parameters * (b.param + b.grad + b.optimizer) / d;
  }
}

double loom_state_bytes(double n, int64_t zero, int64_t dp, bool mixed, double moment_bytes) {
  if (!mixed) return model_state_bytes(n, zero, dp, StateBytes{4, 4, moment_bytes});
  const double d = static_cast<double>(dp);
  if (zero == 0) return n * (10.0 + moment_bytes);
  if (zero == 1) return n * (10.0 + moment_bytes / d);
  if (zero == 2) return n * (2.0 + (8.0 + moment_bytes) / d);
  return n * (8.0 + moment_bytes) / d;
}

ClusterSpec memory_only_cluster() {
  ClusterSpec cluster;
  cluster.memory_bytes = std::numeric_limits<double>::infinity();
  cluster.peak_flops = cluster.intra_bandwidth = cluster.inter_bandwidth = 1e12;
  return cluster;
}

double ring_all_reduce_time(double n, int64_t p, double alpha, double beta) {
  if (p < 2) return 0;
  const double q = static_cast<double>(p);
  return 2.0 * (q - 1) / q * n * beta + 2.0 * (q - 1) * alpha;
}

double ring_all_gather_time(double n, int64_t p, double alpha, double beta) {
  if (p < 2) return 0;
  const double q = static_cast<double>(p);
  return (q - 1) / q * n * beta + (q - 1) * alpha;
}

double all_to_all_time(double n, int64_t p, double alpha, double beta) {
  return ring_all_gather_time(n, p, alpha, beta);
}

double point_to_point_time(double n, double alpha, double beta) {
  return alpha + n * beta;
}

double crossover_bytes(double alpha, double beta) {
  return alpha / beta;
}

double tp_layer_volume_elements(int64_t b, int64_t s, int64_t h, int64_t t) {
  const double q = static_cast<double>(t);
  return 4.0 * 2.0 * (q - 1) / q * static_cast<double>(b) * static_cast<double>(s) * static_cast<double>(h);
}

double pipeline_bubble(int64_t p, int64_t m, int64_t v) {
  return static_cast<double>(p - 1) / static_cast<double>(m * v + p - 1);
}

double layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t heads, int64_t t, Recompute recompute,
                              double coefficient) {
  // In doubles: the sizes a config may give multiply past int64.
  const double sbh = static_cast<double>(s) * static_cast<double>(b) * static_cast<double>(h),
               q = static_cast<double>(t);
  if (recompute == Recompute::full) return 2.0 * sbh / q;
  const double attention = recompute == Recompute::selective
                               ? 0.0
                               : 5.0 * static_cast<double>(heads) * static_cast<double>(s) / static_cast<double>(h);
  return sbh * (coefficient + attention) / q;
}

double layer_activation_coefficient(const Config& c) {
  const double h = static_cast<double>(c.model.hidden_size), f = static_cast<double>(c.ffn_size());
  const double mlp = c.model.activation == Activation::swiglu ? 6.0 * f / h : 4.0 * f / h;
  return 4.0 + 11.0 + 3.0 + mlp;
}

namespace {

struct Link {
  std::string name;
  double alpha, beta;
};

std::string gigabytes(double bytes) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.1f GB", bytes / 1e9);
  return s;
}

// CONFIG at tp T with sequence parallelism, as `loom plan` assumes it.
Config at_tp(const Config& config, int64_t t) {
  Config c = config;
  c.parallel.tp = t;
  c.parallel.sequence_parallel = t > 1;
  return c;
}

}  // namespace

double parameters_per_rank(const Config& config, int64_t tp, int64_t pp) {
  const Config c = at_tp(config, tp);
  // What tp leaves whole on every rank: the norms, the row biases, the shared key/value projections.
  auto replicated_in = [](const std::vector<models::ParameterShape>& shapes) {
    double n = 0;
    for (const auto& p : shapes) n += p.tp_split_dim < 0 ? static_cast<double>(p.numel()) : 0.0;
    return n;
  };
  // Every block has block 0's shapes.
  const double replicated =
      replicated_in(models::gpt_input_parameters(c)) +
      static_cast<double>(c.model.num_layers) * replicated_in(models::gpt_block_parameters(c, 0)) +
      replicated_in(models::gpt_output_parameters(c));
  const double n = static_cast<double>(models::model_num_parameters(c));
  const double whole = (n - replicated) / static_cast<double>(tp) + replicated;
  if (pp == 1) return whole;
  // The blocks split evenly over the stages; the first also holds the embeddings, the last the final
  // norm, the output layer, multi-token prediction's modules and, when tied or when those modules
  // embed, its own copy of the word embedding. A rank of the heavier end stage holds the most.
  auto local = [tp](const models::ParameterShape& s) {
    return static_cast<double>(s.numel()) / (s.tp_split_dim < 0 ? 1.0 : static_cast<double>(tp));
  };
  double ends = 0;  // the input's and the output's, each once
  for (const auto& s : models::gpt_input_parameters(c)) ends += local(s);
  for (const auto& s : models::gpt_output_parameters(c)) ends += local(s);
  return (whole - ends) / static_cast<double>(pp) + heavier_end_stage(c, local);
}

namespace {

// What one rank sends per layer and micro-batch under cp: COUNT times each tensor of ELEMENTS. The
// ring: (cp-1) x (forwards + 2) transfers of one key/value shard; all-to-all: forwards + 1 passes
// of the four re-splits (q, k, v and the context, each whole tensor given, (cp-1)/cp of it sent).
struct CpTransfers {
  double count = 0;
  std::vector<double> elements;
};

CpTransfers cp_transfers(const Config& config, const Layout& l) {
  const auto& m = config.model;
  const double d = static_cast<double>(m.head_dim());  // latent attention's keys' width, values padded to it
  const double heads = static_cast<double>(m.num_heads) / static_cast<double>(l.tp);
  const double kv = m.kv_heads() < l.tp ? 1.0 : static_cast<double>(m.kv_heads()) / static_cast<double>(l.tp);
  const double per_head = static_cast<double>(l.micro_batch * m.seq_len / l.cp) * d;
  const double forwards = l.recompute == Recompute::none ? 1.0 : 2.0;
  if (l.cp_comm == ContextComm::p2p) return {static_cast<double>(l.cp - 1) * (forwards + 2.0), {2.0 * kv * per_head}};
  return {forwards + 1.0, {heads * per_head, kv * per_head, kv * per_head, heads * per_head}};
}

}  // namespace

double cp_layer_volume_elements(const Config& config, const Layout& l) {
  if (l.cp < 2) return 0;
  const auto t = cp_transfers(config, l);
  const double sent = l.cp_comm == ContextComm::p2p ? 1.0 : static_cast<double>(l.cp - 1) / static_cast<double>(l.cp);
  double elements = 0;
  for (double n : t.elements) elements += n * sent;
  return t.count * elements;
}

double muon_parameter_fraction(const Config& config) {
  double matrices = 0;
  auto add = [&](const std::vector<models::ParameterShape>& shapes) {
    for (const auto& p : shapes) {
      if (muon_trains(config.train.muon, p.name, static_cast<int64_t>(p.shape.size())))
        matrices += static_cast<double>(p.numel());
    }
  };
  add(models::gpt_input_parameters(config));
  if (config.train.muon.include.empty() && config.train.muon.exclude.empty()) {
    // Every block alike: block 0's times the layers (a plan estimates many layouts).
    const double before = matrices;
    add(models::gpt_block_parameters(config, 0));
    matrices = before + (matrices - before) * static_cast<double>(config.model.num_layers);
  } else {
    for (int64_t layer = 0; layer < config.model.num_layers; ++layer) add(models::gpt_block_parameters(config, layer));
  }
  add(models::gpt_output_parameters(config));
  return matrices / static_cast<double>(models::model_num_parameters(config));
}

bool is_gradient_group(const std::string& group) {
  return group.rfind("dp", 0) == 0 || group.rfind("expert-dp", 0) == 0;
}

double exposed_dp_seconds(double dp_s, double unhidden_s, double compute_s) {
  return std::max(0.0, dp_s - unhidden_s - 2.0 / 3.0 * compute_s) + unhidden_s;
}

LayoutEstimate estimate_layout(const Config& config, const ClusterSpec& cluster, const Layout& l) {
  LayoutEstimate e;
  e.layout = l;
  const auto& m = config.model;
  const bool mixed = config.train.precision != TrainPrecision::fp32;
  StateBytes bytes = mixed ? StateBytes{2, 2, 12} : StateBytes{4, 4, 8};
  const double element = mixed ? 2.0 : 4.0;
  const DpWireBytes on_wire = dp_wire_bytes(config, l.zero_stage);
  const int64_t micro_batches = config.train.global_batch_size / (l.micro_batch * l.dp);
  const int64_t layers_per_stage = m.num_layers / l.pp;
  // Gradients are averaged, and ZeRO shards, over dp x cp (HSDP: over its shard group, replicated
  // across REPLICAS of them); a rank holds S / cp tokens of a sequence.
  const int64_t grad_ranks = l.dp * l.cp, local_tokens = m.seq_len / l.cp;
  const int64_t shard_ranks = l.shard_ranks(), replicas = grad_ranks / shard_ranks;
  if (config.train.optimizer == OptimizerKind::muon) {
    // Muon keeps one fp32 momentum for its matrices where AdamW keeps two moments. Under ZeRO-1
    // loom's AdamW keeps its moment shards over whole buckets, Muon's weights included, and the
    // owners' momenta come on top (a dp-th of them on each rank, like the shards).
    const double momentum = 4.0 * muon_parameter_fraction(config);
    bytes.optimizer += l.zero_stage >= 1 && grad_ranks > 1 ? momentum : -momentum;
  }

  e.parameters_per_rank = parameters_per_rank(config, l.tp, l.pp);
  // A mixture of experts: parameters_per_rank spreads the routed experts over tp and pp like the
  // rest; a rank holds its busiest stage's num_experts / ep of each MoE block's experts (split over
  // tp only with expert_tp), whose state ZeRO shards over the expert-dp x cp ranks that share them.
  double expert_params = 0;
  const int64_t expert_ranks = l.dp / std::max<int64_t>(l.ep, 1) * l.cp;
  if (config.model.moe.enabled()) {
    Config at_layout = config;
    auto& p = at_layout.parallel;
    p.tp = l.tp, p.pp = l.pp, p.cp = l.cp, p.dp = l.dp, p.ep = l.ep, p.virtual_stages = l.virtual_stages;
    if (p.expert_tp > 1) p.expert_tp = l.tp;
    const auto experts = expert_plan(at_layout, l.world(), l.ep);
    const double all_experts = static_cast<double>(experts.moe_layers * config.model.moe.num_experts) *
                               static_cast<double>(models::moe_expert_numel(config));
    expert_params = experts.expert_parameters;
    e.parameters_per_rank += expert_params - all_experts / static_cast<double>(l.tp * l.pp);
  }
  e.expert_parameters_per_rank = expert_params;
  const double dense_params = e.parameters_per_rank - expert_params;
  // The dp passes of the dense parameters (launch/dp_passes.h); the experts' below.
  const DpModel dense_model = dense_dp_model(config, l.tp, l.pp, micro_batches);
  e.dp_passes = dp_passes(config, l.zero_stage, micro_batches, dense_model);
  const DpPasses& dense_passes = e.dp_passes;
  // What loom holds (its memory report's figures), not the textbook's 2 + 2 + 12 bytes: under mixed
  // precision its gradients and master weights are fp32 and stage 1 keeps the masters whole.
  const double moments = bytes.optimizer - (mixed ? 4.0 : 0.0);
  e.state_bytes = loom_state_bytes(dense_params, l.zero_stage, shard_ranks, mixed, moments) +
                  loom_state_bytes(expert_params, l.zero_stage, expert_ranks, mixed, moments);
  // 1F1B keeps up to pp micro-batches in flight on the first stage; interleaving adds (p-1)/(p v).
  const double in_flight =
      static_cast<double>(std::min(l.pp, micro_batches)) *
      (l.virtual_stages > 1 ? 1.0 + static_cast<double>(l.pp - 1) / static_cast<double>(l.pp * l.virtual_stages) : 1.0);
  // Under cp everything per token divides by cp; the attention scores too, (S/cp)^2 blocks for the
  // ring, a cp-th of the heads over the whole S x S for all-to-all (heads x cp at S / cp).
  const int64_t score_heads = l.cp_comm == ContextComm::a2a ? m.num_heads * l.cp : m.num_heads;
  e.activation_bytes = layer_activation_bytes(local_tokens, l.micro_batch, m.hidden_size, score_heads, l.tp,
                                              l.recompute, layer_activation_coefficient(config)) *
                       static_cast<double>(layers_per_stage) * in_flight * (element / 2.0);
  e.memory_bytes = e.state_bytes + e.activation_bytes;
  e.fits = e.memory_bytes <= cluster.memory_bytes;

  // Ranks are laid out tp fastest, then cp, then dp, then pp: a group stays in a node when its span does.
  const Link intra{"intra-node", cluster.intra_latency, 1.0 / cluster.intra_bandwidth};
  const Link inter{"inter-node", cluster.inter_latency, 1.0 / cluster.inter_bandwidth};
  const Link& tp_link = l.tp <= cluster.gpus_per_node ? intra : inter;
  const Link& cp_link = l.tp * l.cp <= cluster.gpus_per_node ? intra : inter;
  Link dp_link = l.tp * l.cp * l.dp <= cluster.gpus_per_node ? intra : inter;
  // Under a shared NIC the dp ring's one flow per group out of a node shares the link with the
  // node's other groups' flows: L (the group's ranks on a node) times a GPU's share.
  if (cluster.inter_nic_shared && dp_link.name == inter.name) {
    const int64_t on_node = std::clamp<int64_t>(cluster.gpus_per_node / std::max<int64_t>(l.tp, 1), 1, grad_ranks);
    dp_link.beta /= static_cast<double>(on_node);
  }
  const Link& pp_link = l.world() <= cluster.gpus_per_node ? intra : inter;
  e.tp_across_nodes = l.tp > cluster.gpus_per_node;

  const double activation = static_cast<double>(l.micro_batch) * static_cast<double>(local_tokens) *
                            static_cast<double>(m.hidden_size) * element;
  const double m_d = static_cast<double>(micro_batches);
  if (l.tp > 1) {
    const double per_micro = static_cast<double>(layers_per_stage) * (l.recompute == Recompute::full ? 6.0 : 4.0);
    const double q = static_cast<double>(l.tp);
    GroupTraffic tp{"tp", tp_link.name, m_d * per_micro * 2.0 * (q - 1) / q * activation,
                    m_d * per_micro * ring_all_reduce_time(activation, l.tp, tp_link.alpha, tp_link.beta)};
    // Once a step, the partial gradients of the tp-replicated parameters (the norms, row biases
    // and, when tp > kv_heads, the shared key/value projections) are summed over tp.
    double summed = 0;
    for (const auto& p : models::gpt_block_parameters(at_tp(config, l.tp), 0))
      summed += p.tp_summed ? static_cast<double>(p.numel()) : 0.0;
    summed *= static_cast<double>(layers_per_stage) * 4.0;  // fp32, as the masters' gradients
    tp.bytes += 2.0 * (q - 1) / q * summed;
    tp.seconds += ring_all_reduce_time(summed, l.tp, tp_link.alpha, tp_link.beta);
    e.traffic.push_back(tp);
  }
  if (l.pp > 1) {
    const double message = activation / static_cast<double>(l.tp);  // sequence-parallel activations
    const double sends = m_d * 2.0 * static_cast<double>(l.virtual_stages);
    e.traffic.push_back(
        {"pp", pp_link.name, sends * message, sends * point_to_point_time(message, pp_link.alpha, pp_link.beta)});
  }
  if (l.cp > 1) {
    // On the critical path, like tp's: the ring overlaps each transfer with a block of attention,
    // which this model does not credit.
    const double layer_micro = m_d * static_cast<double>(layers_per_stage);
    const auto transfers = cp_transfers(config, l);
    double seconds = 0;
    for (double n : transfers.elements) {
      seconds += transfers.count * (l.cp_comm == ContextComm::p2p
                                        ? point_to_point_time(n * element, cp_link.alpha, cp_link.beta)
                                        : all_to_all_time(n * element, l.cp, cp_link.alpha, cp_link.beta));
    }
    e.traffic.push_back(
        {"cp", cp_link.name, layer_micro * cp_layer_volume_elements(config, l) * element, layer_micro * seconds});
  }
  double dp_seconds = 0;
  if (grad_ranks > 1 && replicas > 1) {
    // HSDP: the ZeRO traffic inside the shard group (its span decides its link), and each shard's
    // 1/S of the gradients all-reduced across the replicas (over the whole group's link).
    const Link& shard_link = l.tp * shard_ranks <= cluster.gpus_per_node ? intra : inter;
    const double grads = dense_params * on_wire.grad, params = dense_params * on_wire.param;
    const double s = static_cast<double>(shard_ranks), r = static_cast<double>(replicas);
    // The passes inside the shard group; each shard's gradients are all-reduced across the replicas
    // between its reduce-scatter and the rest.
    const double shard_wire = ring_passes_bytes(dense_passes, grads, params, shard_ranks);
    const double shard_seconds =
        ring_passes_time(dense_passes, grads, params, shard_ranks, shard_link.alpha, shard_link.beta);
    const double replica_wire = 2 * (r - 1) / r * dense_passes.reductions * grads / s;
    const double replica_seconds =
        replica_wire * dp_link.beta + dense_passes.reduction_calls * 2 * (r - 1) * dp_link.alpha;
    e.traffic.push_back({"dp-shard", shard_link.name, shard_wire, shard_seconds});
    e.traffic.push_back({"dp-replicate", dp_link.name, replica_wire, replica_seconds});
    dp_seconds = shard_seconds + replica_seconds;
    e.dp_unhidden_s = cluster.later_steps_overlap_backward() ? 0.0 : replica_seconds;
  } else if (grad_ranks > 1) {
    const double grads = dense_params * on_wire.grad, params = dense_params * on_wire.param;
    dp_seconds = ring_passes_time(dense_passes, grads, params, grad_ranks, dp_link.alpha, dp_link.beta);
    e.traffic.push_back({l.cp > 1 ? "dp-cp" : "dp", dp_link.name,
                         ring_passes_bytes(dense_passes, grads, params, grad_ranks), dp_seconds});
  }
  if (expert_params > 0 && expert_ranks > 1) {
    // The experts' gradients over their expert-dp x cp ring, as the dense ones over dp (at the dp
    // group's link), all of them in the blocks; Muon's ZeRO-1 sends their buckets whole too, then
    // gathers, with no broadcast.
    // (In buckets of parallel.bucket_mb of fp32 gradients.)
    const double bucket_bytes = config.parallel.bucket_mb * 1024 * 1024;
    DpModel experts;
    experts.blocks = dense_model.blocks;
    experts.buckets = bucket_bytes > 0 ? std::max(1.0, std::ceil(expert_params * 4.0 / bucket_bytes)) : 1.0;
    experts.split = dense_model.split;
    const DpPasses passes = dp_passes(config, l.zero_stage, micro_batches, experts);
    const double grads = expert_params * on_wire.grad, params = expert_params * on_wire.param;
    const double wire = ring_passes_bytes(passes, grads, params, expert_ranks);
    const double seconds = ring_passes_time(passes, grads, params, expert_ranks, dp_link.alpha, dp_link.beta);
    e.traffic.push_back({l.cp > 1 ? "expert-dp-cp" : "expert-dp", dp_link.name, wire, seconds});
    dp_seconds += seconds;
  }
  e.dp_s = dp_seconds;

  const double tokens = static_cast<double>(config.train.global_batch_size * m.seq_len);
  const double model_flops = models::gpt_flops_per_token(config) * tokens;
  // Full recomputation runs the forward twice (4/3 of the work); selective re-runs the
  // attention core, 4 S H flops per token and layer (QK^T and PV).
  double hardware_flops = model_flops * (l.recompute == Recompute::full ? 4.0 / 3.0 : 1.0);
  if (l.recompute == Recompute::selective)
    hardware_flops += 4.0 * static_cast<double>(m.num_layers * m.seq_len * m.hidden_size) * tokens;
  const double world = static_cast<double>(l.world());
  e.compute_s = hardware_flops / (world * cluster.peak_flops * cluster.compute_efficiency);
  e.bubble = pipeline_bubble(l.pp, micro_batches, l.virtual_stages);
  double critical = e.compute_s;
  for (const auto& t : e.traffic) {
    if (!is_gradient_group(t.group)) critical += t.seconds;  // tp, cp and pp transfers sit on it (not dp's)
  }
  // Bucketed dp reduction hides behind backward (two thirds of compute); only the rest shows.
  const double dp_exposed = exposed_dp_seconds(dp_seconds, e.dp_unhidden_s, e.compute_s);
  e.exposed_comm_s = dp_exposed + (critical - e.compute_s);
  e.step_s = critical / (1.0 - e.bubble) + dp_exposed;
  e.mfu = model_flops / (e.step_s * world * cluster.peak_flops);
  if (!e.fits) {
    e.reason = "out of memory";
    e.verdict = "out of memory: " + gigabytes(e.memory_bytes) + " > " + gigabytes(cluster.memory_bytes);
  }
  return e;
}

Layout layout_of(const Config& config) {
  const auto& p = config.parallel;
  return {p.tp,
          p.pp,
          p.dp,
          p.virtual_stages,
          p.zero_stage,
          config.train.micro_batch_size,
          config.train.recompute,
          p.cp,
          p.cp_comm,
          p.dp_shard,
          p.ep};
}

int64_t total_traffic_bytes(const LayoutEstimate& e) {
  double bytes = 0;
  for (const auto& t : e.traffic) bytes += t.bytes;
  return std::llround(bytes);
}

std::vector<LayoutEstimate> enumerate_layouts(const Config& config, const ClusterSpec& cluster, int64_t world) {
  const auto& m = config.model;
  const int64_t g = config.train.global_batch_size;
  std::vector<LayoutEstimate> all;
  // Context parallelism for long sequences: cp splits the sequence into 2 cp chunks; all-to-all
  // also needs each tp rank's heads and kv heads to divide by cp.
  std::vector<std::pair<int64_t, ContextComm>> contexts{{1, ContextComm::p2p}};
  if (m.seq_len >= kLongSequence) {
    for (int64_t cp : {2, 4, 8, 16})
      contexts.push_back({cp, ContextComm::p2p}), contexts.push_back({cp, ContextComm::a2a});
  }
  for (int64_t tp = 1; tp <= std::min<int64_t>(world, 64); tp *= 2) {
    const int64_t kv = m.kv_heads();
    if (m.num_heads % tp || (kv % tp && tp % kv) || config.ffn_size() % tp || m.seq_len % tp) continue;
    const int64_t heads_local = m.num_heads / tp, kv_local = kv < tp ? 1 : kv / tp;
    for (const auto& [cp, comm] : contexts) {
      if (tp * cp > world || m.seq_len % (2 * cp) || (m.seq_len / cp) % tp) continue;
      if (comm == ContextComm::a2a && (heads_local % cp || kv_local % cp)) continue;
      for (int64_t pp = 1; pp <= m.num_layers && tp * cp * pp <= world; ++pp) {
        if (m.num_layers % pp || world % (tp * cp * pp)) continue;
        const int64_t dp = world / (tp * cp * pp);
        for (int64_t v : {1, 2, 4}) {
          if (m.num_layers % (pp * v) || (v > 1 && pp == 1)) continue;
          for (int64_t mb : {1, 2, 4, 8}) {
            if (g % (mb * dp)) continue;
            const int64_t micro = g / (mb * dp);
            if ((pp > 1 && micro < pp) || (v > 1 && micro % pp)) continue;
            for (int64_t zero = 0; zero <= 3; ++zero) {
              if (dp * cp == 1 && zero > 0) continue;
              for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
                all.push_back(estimate_layout(config, cluster, {tp, pp, dp, v, zero, mb, recompute, cp, comm}));
              }
            }
          }
        }
      }
    }
  }
  // Fitting first, then faster; at the same time (to the microsecond: the estimate is no finer)
  // less traffic, then less memory, so ZeRO-1 ranks above ZeRO-0 when they cost the same time.
  std::stable_sort(all.begin(), all.end(), [](const LayoutEstimate& a, const LayoutEstimate& b) {
    if (a.fits != b.fits) return a.fits;
    const auto micros = [](const LayoutEstimate& e) { return std::llround(e.step_s * 1e6); };
    if (micros(a) != micros(b)) return micros(a) < micros(b);
    if (total_traffic_bytes(a) != total_traffic_bytes(b)) return total_traffic_bytes(a) < total_traffic_bytes(b);
    return a.memory_bytes < b.memory_bytes;
  });
  if (all.empty() || !all.front().fits) return all;
  const double best = all.front().step_s;
  for (size_t i = 1; i < all.size(); ++i) {
    auto& e = all[i];
    if (!e.verdict.empty()) continue;
    char s[160];
    if (e.tp_across_nodes) {
      e.reason = "tp across nodes";
      std::snprintf(s, sizeof(s), "tp=%lld spans %lld nodes: its per-layer all-reduces cross the inter-node link",
                    static_cast<long long>(e.layout.tp), static_cast<long long>(e.layout.tp / cluster.gpus_per_node));
    } else if (e.bubble > 0.2) {
      e.reason = "pipeline bubble";
      std::snprintf(s, sizeof(s), "pipeline bubble %.0f%%", 100.0 * e.bubble);
    } else {
      e.reason = "slower";
      std::snprintf(s, sizeof(s), "slower: %.2fx the best step time", e.step_s / best);
    }
    e.verdict = s;
  }
  return all;
}

}  // namespace loom::launch
