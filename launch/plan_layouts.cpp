// loom plan CONFIG --cluster FILE [--world N]: every valid layout of the
// model on the cluster, estimated by the cost model (parallel/layout_cost.h);
// the best few in a table, why the others lose, and the usual decision order
// (tp inside a node, pp across nodes, dp with the rest) as a check.
// Without --cluster: the model-state bytes per rank of each ZeRO stage.
#include <chrono>
#include <cstdio>
#include <map>

#include "core/config.h"
#include "core/errors.h"
#include "launch/commands.h"
#include "launch/dp_variants.h"
#include "launch/expert_plan.h"
#include "launch/layout_cost.h"
#include "models/gpt_shapes.h"

namespace loom::launch {
namespace {

// 1100048384 -> "1,100,048,384".
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void print_state_bytes(Config config, int64_t world) {
  // The layout as a run would take it: one that cannot be (a world tp does not divide, pp over more
  // stages than layers) is refused naming the key, as train would. The batch does not change the
  // state, so it is taken as pp micro-batches per dp rank (what every schedule takes) rather than checked.
  const auto& given = config.parallel;
  const int64_t model_ranks = given.tp * given.cp * given.pp;
  if (model_ranks > 0 && world % model_ranks == 0)
    config.train.global_batch_size = config.train.micro_batch_size * (world / model_ranks) * given.pp;
  resolve_and_validate(config, world);
  const auto& p = config.parallel;
  // ZeRO shards over dp x cp, or under HSDP over its shard group (parallel.dp_shard dp ranks x cp);
  // a mixture of experts' routed experts over the expert-dp (dp / ep) x cp ranks that share them.
  const int64_t grad_ranks = p.dp * p.cp;
  const bool hsdp = p.dp_shard > 0 && p.dp_shard < p.dp;
  const int64_t dp = hsdp ? p.dp_shard * p.cp : grad_ranks;
  const int64_t expert_ranks = p.dp / std::max<int64_t>(p.ep, 1) * p.cp;
  const auto estimate = estimate_layout(config, memory_only_cluster(), layout_of(config));
  const double n = estimate.parameters_per_rank, experts = estimate.expert_parameters_per_rank;
  const bool mixed = config.train.precision != TrainPrecision::fp32;
  const StateBytes bytes = mixed ? StateBytes{2, 2, 12} : StateBytes{4, 4, 8};
  std::printf(
      "model state per rank: %.4g parameters (of %s, tp=%lld pp=%lld), dp=%lld, %s: %g B param, %g B grad, %g B "
      "optimizer each\n",
      n, with_commas(models::model_num_parameters(config)).c_str(), static_cast<long long>(p.tp),
      static_cast<long long>(p.pp), static_cast<long long>(dp), to_string(config.train.precision).c_str(), bytes.param,
      bytes.grad, bytes.optimizer);
  if (experts > 0) {
    std::printf(
        "  (of them %.4g the routed experts' at ep=%lld, whose state ZeRO shards over the %lld ranks that share "
        "them)\n",
        experts, static_cast<long long>(p.ep), static_cast<long long>(expert_ranks));
  }
  if (hsdp) {
    std::printf("  (HSDP: ZeRO shards over parallel.dp_shard x cp = %lld ranks, replicated %lld times across)\n",
                static_cast<long long>(dp), static_cast<long long>(grad_ranks / dp));
  }
  for (int64_t zero = 0; zero <= 3; ++zero) {
    const double textbook =
        model_state_bytes(n - experts, zero, dp, bytes) + model_state_bytes(experts, zero, expert_ranks, bytes);
    const double held =
        loom_state_bytes(n - experts, zero, dp, mixed) + loom_state_bytes(experts, zero, expert_ranks, mixed);
    std::printf("  zero_stage %lld: %12.0f bytes (%.3f GB)", static_cast<long long>(zero), textbook, textbook / 1e9);
    std::printf(" | loom holds %12.0f bytes (%.3f GB)\n", held, held / 1e9);
  }
  if (mixed) {
    std::printf(
        "  (loom under %s: %s parameters 2 B, fp32 gradients 4 B, fp32 master weights 4 B, Adam moments 8 B; "
        "stage 1 shards the moments, 2 also masters and gradients, 3 everything)\n",
        to_string(config.train.precision).c_str(), to_string(config.train.precision).c_str());
  }
}

// An MoE's experts at every ep the layout allows: what a rank holds and sends (launch/expert_plan.h).
void print_expert_plan(const Config& config, int64_t world) {
  const auto& moe = config.model.moe;
  const auto degrees = expert_parallel_degrees(config, world);
  const auto first = expert_plan(config, world, 1);
  std::printf(
      "experts: %lld MoE blocks of %lld experts (top %lld), %s parameters each; %.0f tokens routed per rank a step "
      "(tp=%lld cp=%lld pp=%lld, dp=%lld), routing assumed even:\n",
      static_cast<long long>(first.moe_layers), static_cast<long long>(moe.num_experts),
      static_cast<long long>(moe.top_k), with_commas(models::moe_expert_numel(config)).c_str(), first.routed_tokens,
      static_cast<long long>(config.parallel.tp), static_cast<long long>(config.parallel.cp),
      static_cast<long long>(config.parallel.pp), static_cast<long long>(first.dp));
  const bool split = config.parallel.expert_tp > 1;
  std::printf("  %-5s %14s %22s %16s %24s%s\n", "ep", "experts/block", "expert params/rank", "their state GB",
              "all-to-all GB/step/rank", split ? "   expert-tp GB/step/rank" : "");
  for (int64_t ep : degrees) {
    const auto e = expert_plan(config, world, ep);
    std::printf("  %-5lld %14lld %22s %16.2f %24.3f", static_cast<long long>(ep),
                static_cast<long long>(e.experts_per_rank),
                with_commas(static_cast<int64_t>(e.expert_parameters)).c_str(), e.expert_state_bytes / 1e9,
                e.all_to_all_bytes / 1e9);
    if (split) std::printf("   %23.3f", e.expert_tp_bytes / 1e9);
    std::printf("\n");
  }
  std::printf(
      "  (state: parameters, gradients and AdamW moments of the rank's experts before ZeRO; all-to-all: dispatch and\n"
      "  combine, forward and backward, (ep - 1) / ep of the top_k copies of each routed token leaving the rank)\n");
  if (split) {
    std::printf(
        "  (expert-tp: each expert split over parallel.expert_tp = %lld ranks, its outputs and inputs' gradients "
        "summed over tp%s)\n",
        static_cast<long long>(config.parallel.expert_tp),
        config.parallel.sequence_parallel ? ", the sequence and its gradient gathered" : "");
  }
}

// The dp reduction of the config's own layout, when it is one on WORLD (what a run of it would
// send; bench/fabric_dp.sh reads it beside the measured times).
void print_own_layout_variants(const Config& config, const parallel::ClusterSpec& cluster, int64_t world) {
  const auto& p = config.parallel;
  Layout own = layout_of(config);
  if (own.dp <= 0) own.dp = world / (p.tp * p.cp * p.pp);  // not resolved: the rest of the world
  if (own.world() != world || own.dp * own.cp < 2) return;
  char which[160];
  const std::string shard = own.shard_ranks() < own.dp * own.cp ? " dp_shard=" + std::to_string(own.dp_shard) : "";
  std::snprintf(which, sizeof(which), "this config's layout (tp=%lld cp=%lld pp=%lld dp=%lld%s zero %lld, as %s, %s)",
                static_cast<long long>(own.tp), static_cast<long long>(own.cp), static_cast<long long>(own.pp),
                static_cast<long long>(own.dp), shard.c_str(), static_cast<long long>(own.zero_stage),
                to_string(p.dp_collectives).c_str(), to_string(p.grad_compression).c_str());
  // A layout whose dp does not divide the batch has no step to weigh (loom train refuses it).
  const int64_t per_step = own.micro_batch * own.dp;
  if (per_step <= 0 || config.train.global_batch_size % per_step != 0) {
    std::printf(
        "%s: train.global_batch_size %lld is not a multiple of micro_batch_size %lld x dp %lld, so its "
        "reduction is not weighed\n",
        which, static_cast<long long>(config.train.global_batch_size), static_cast<long long>(own.micro_batch),
        static_cast<long long>(own.dp));
    return;
  }
  print_dp_variants(config, cluster, estimate_layout(config, cluster, own), which);
}

}  // namespace

int plan(const PlanArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  Config config = load_config(args.config_path, args.overrides);
  if (args.cluster_path.empty()) {
    if (args.world <= 0) throw InputError("loom plan needs --cluster FILE, or --world N for the model-state table");
    print_state_bytes(config, args.world);
    if (config.model.moe.enabled()) print_expert_plan(config, args.world);
    return 0;
  }
  const auto cluster = parallel::load_cluster(args.cluster_path);
  const int64_t world = args.world > 0 ? args.world : cluster.gpus();
  if (world > cluster.gpus()) {
    throw InputError("--world " + std::to_string(world) + " is more than the cluster's " +
                     std::to_string(cluster.gpus()) + " GPUs");
  }
  const auto all = enumerate_layouts(config, cluster, world);
  if (all.empty()) throw InputError("no valid layout of this model on " + std::to_string(world) + " GPUs");
  // An MoE's tokens each pass through top_k of its experts: the activated parameters beside the total.
  std::string activated =
      config.model.moe.enabled()
          ? " (" + with_commas(models::activated_parameters_per_token(config)) + " activated per token)"
          : "";
  if (config.model.mtp.depth > 0) {  // DeepSeek-V3 counts its main model apart from the MTP modules
    activated += " of which " + with_commas(models::mtp_num_parameters(config)) + " in " +
                 std::to_string(config.model.mtp.depth) + " multi-token prediction module(s)";
    if (config.model.moe.enabled()) activated += " (the activated count is the main model's)";
  }
  std::printf("%s on %lld GPUs of %s (%lld per node); %s parameters%s, global batch %lld x %lld tokens\n",
              args.config_path.c_str(), static_cast<long long>(world), cluster.name.c_str(),
              static_cast<long long>(cluster.gpus_per_node), with_commas(models::model_num_parameters(config)).c_str(),
              activated.c_str(), static_cast<long long>(config.train.global_batch_size),
              static_cast<long long>(config.model.seq_len));
  std::printf("  %-4s %-7s %-4s %-5s %-2s %-4s %-3s %-9s %9s %9s %6s %7s  %s\n", "tp", "cp", "pp", "dp", "v", "zero",
              "mb", "recompute", "mem GB", "step s", "MFU", "bubble", "traffic per step (GB, link)");
  int shown = 0;
  for (const auto& e : all) {
    if (!e.fits || shown >= args.top) break;
    const auto& l = e.layout;
    std::string traffic;
    for (const auto& t : e.traffic) {
      char s[80];
      std::snprintf(s, sizeof(s), "%s%s %.2f %s", traffic.empty() ? "" : ", ", t.group.c_str(), t.bytes / 1e9,
                    t.link.c_str());
      traffic += s;
    }
    const std::string cp = std::to_string(l.cp) + (l.cp > 1 ? " " + to_string(l.cp_comm) : "");
    std::printf("  %-4lld %-7s %-4lld %-5lld %-2lld %-4lld %-3lld %-9s %9.1f %9.2f %5.1f%% %6.1f%%  %s\n",
                static_cast<long long>(l.tp), cp.c_str(), static_cast<long long>(l.pp), static_cast<long long>(l.dp),
                static_cast<long long>(l.virtual_stages), static_cast<long long>(l.zero_stage),
                static_cast<long long>(l.micro_batch), to_string(l.recompute).c_str(), e.memory_bytes / 1e9, e.step_s,
                100 * e.mfu, 100 * e.bubble, traffic.c_str());
    ++shown;
  }
  if (shown == 0) std::printf("  no layout fits in %.0f GB per GPU\n", cluster.memory_bytes / 1e9);
  std::printf(
      "  MFU: the model's FLOPs per step (6 x weights + 12 L h S per token) over the estimated step time x %lld GPUs "
      "x\n"
      "  their peak; the estimate runs compute at compute_efficiency = %.0f%% of peak, so no layout shows more.\n"
      "  Layouts of the same step time are ordered by traffic, then memory.\n",
      static_cast<long long>(world), 100 * cluster.compute_efficiency);

  // Why the others lose: one line per kind of reason, with an example.
  std::map<std::string, std::pair<int, std::string>> reasons;
  for (size_t i = static_cast<size_t>(shown); i < all.size(); ++i) {
    const auto& v = all[i].verdict;
    auto& r = reasons[all[i].reason];
    if (r.first++ == 0) {
      const auto& l = all[i].layout;
      char s[200];
      std::snprintf(s, sizeof(s), "tp=%lld cp=%lld pp=%lld dp=%lld zero %lld mb %lld %s: %s",
                    static_cast<long long>(l.tp), static_cast<long long>(l.cp), static_cast<long long>(l.pp),
                    static_cast<long long>(l.dp), static_cast<long long>(l.zero_stage),
                    static_cast<long long>(l.micro_batch), to_string(l.recompute).c_str(), v.c_str());
      r.second = s;
    }
  }
  std::printf("why the other %zu layouts lose:\n", all.size() - static_cast<size_t>(shown));
  for (const auto& [kind, r] : reasons) std::printf("  %6d x %-16s e.g. %s\n", r.first, kind.c_str(), r.second.c_str());

  if (all.front().fits) {
    const auto& b = all.front().layout;
    const bool tp_in_node = b.tp <= cluster.gpus_per_node;
    const bool pp_across = b.pp == 1 || b.tp * b.cp * b.dp >= cluster.gpus_per_node;
    std::printf("decision order check: tp inside a node: %s; pp across nodes: %s; dp with the rest: dp=%lld\n",
                tp_in_node ? "yes" : "NO", pp_across ? "yes" : "no (pp groups stay inside nodes)",
                static_cast<long long>(b.dp));
  }
  if (all.front().fits) print_dp_variants(config, cluster, all.front(), "the best layout");
  print_own_layout_variants(config, cluster, world);
  if (config.model.moe.enabled()) print_expert_plan(config, world);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "assumptions: %s model state (bytes per parameter above), Korthikanti et al. activations, sequence\n"
      "parallelism with tp, ranks tp-fastest then cp, dp, pp, ring collectives, tp, cp and pp transfers on the\n"
      "critical path, dp reduction hidden behind backward up to 2/3 of compute, compute at %.0f%% of peak;\n"
      "cp (2-16, ring or all-to-all) considered from %lld tokens per sequence.\n"
      "%zu layouts estimated in %.3f s\n",
      config.train.precision == TrainPrecision::fp32 ? "fp32" : "mixed-precision", 100 * cluster.compute_efficiency,
      static_cast<long long>(kLongSequence), all.size(), seconds);
  return 0;
}

}  // namespace loom::launch
