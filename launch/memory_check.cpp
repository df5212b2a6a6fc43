#include "launch/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/cuda_backend.h"
#include "core/errors.h"
#include "launch/layout_cost.h"
#include "launch/moe_metrics.h"
#include "models/gpt_shapes.h"
#include "models/moe.h"

namespace loom::launch {
namespace {

std::string gigabytes(double bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f GB", bytes / 1e9);
  return text;
}

// The parameters from the sizes alone, in doubles: attention 4 h^2, the MLP (or every expert's)
// 2 or 3 h f, embeddings and output 2 V h. Within a small factor of the count, and never overflows.
double approximate_parameters(const Config& c) {
  const auto& m = c.model;
  const double h = static_cast<double>(m.hidden_size), f = static_cast<double>(c.ffn_size());
  const double per_f = (m.activation == Activation::gelu ? 2.0 : 3.0) * h;
  const double experts = m.moe.enabled() ? static_cast<double>(m.moe.num_experts + m.moe.n_shared_experts) : 0.0;
  const double mlp = m.moe.enabled() ? experts * per_f * static_cast<double>(c.moe_ffn_size()) : per_f * f;
  return static_cast<double>(m.num_layers) * (4.0 * h * h + std::max(mlp, per_f * f)) +
         2.0 * static_cast<double>(m.vocab_size) * h;
}

// The lower of two limits, reading "max" (cgroup v2) or an absurd number (v1) as none.
double cgroup_limit_bytes() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text == "max") continue;
    try {
      const double limit = std::stod(text);
      if (limit > 0 && limit < 1e18) return limit;
    } catch (const std::exception&) {
    }
  }
  return -1;
}

}  // namespace

MemoryEstimate estimate_rank_memory(const Config& config, bool scores_kept) {
  const auto& m = config.model;
  const auto& p = config.parallel;
  const auto& t = config.train;
  MemoryEstimate e;
  e.parameters = approximate_parameters(config);
  if (e.parameters > kMaxParameters) return e;  // loom plan's int64 counts are not made for it
  // Without kept scores a layer holds what selective recomputation leaves (Korthikanti's 5 a S / H term gone).
  const Recompute recompute = !scores_kept && t.recompute == Recompute::none ? Recompute::selective : t.recompute;
  Layout layout = layout_of(config);
  layout.recompute = recompute;
  const auto plan = estimate_layout(config, memory_only_cluster(), layout);
  e.parameters = static_cast<double>(models::model_num_parameters(config));
  // (The plan holds num_experts / ep of each MoE block's routed experts on a rank, of its busiest
  // pipeline stage, split over tp only where parallel.expert_tp splits them.)
  e.rank_parameters = plan.parameters_per_rank;
  e.state_bytes = plan.state_bytes;
  // Korthikanti et al. leave out the logits: the last stage holds them and their gradient in fp32,
  // once for the model and once for each multi-token prediction module.
  const double logits = 2.0 * 4.0 * static_cast<double>(t.micro_batch_size) * static_cast<double>(m.seq_len / p.cp) *
                        static_cast<double>(m.vocab_size) / static_cast<double>(p.tp) *
                        static_cast<double>(1 + m.mtp.depth);
  e.activation_bytes = plan.activation_bytes + logits;
  return e;
}

std::string memory_refusal(const Config& config, const MemoryEstimate& estimate, int64_t ranks, double available,
                           const std::string& where) {
  const auto& m = config.model;
  const auto& p = config.parallel;
  std::ostringstream sizes;
  sizes << "model.num_layers = " << m.num_layers << ", model.hidden_size = " << m.hidden_size
        << ", model.ffn_hidden_size = " << config.ffn_size() << ", model.vocab_size = " << m.vocab_size
        << ", model.seq_len = " << m.seq_len;
  if (m.moe.enabled()) sizes << ", model.moe.num_experts = " << m.moe.num_experts;
  sizes << ", train.micro_batch_size = " << config.train.micro_batch_size;
  char count[64];
  std::snprintf(count, sizeof(count), "%.3g", estimate.parameters);
  if (estimate.parameters > kMaxParameters) {
    return std::string("the model has about ") + count + " parameters, more than loom can train (1e15); its size is " +
           sizes.str();
  }
  const double needed = estimate.rank_bytes() * static_cast<double>(ranks);
  if (needed <= available) return "";
  std::ostringstream out;
  out << "the model does not fit: loom plan's estimate is " << gigabytes(estimate.rank_bytes()) << " per rank ("
      << count << " parameters, " << gigabytes(estimate.state_bytes)
      << " of parameters, gradients and optimizer state, " << gigabytes(estimate.activation_bytes)
      << " of activations)";
  if (ranks > 1) out << " x " << ranks << " ranks = " << gigabytes(needed);
  out << ", more than " << where << " of " << gigabytes(available) << ". Its size is " << sizes.str()
      << ", at tp = " << p.tp << ", pp = " << p.pp << ", cp = " << p.cp << ", dp = " << p.dp
      << ", parallel.zero_stage = " << p.zero_stage
      << "; make it smaller, spread it over more ranks (loom plan shows the layouts), or set train.memory_check=false "
         "to train anyway";
  return out.str();
}

double machine_memory_bytes(std::string& where) {
  double total = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    if (key == "MemTotal:") {
      double kib = 0;
      if (meminfo >> kib) total = kib * 1024.0;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  where = "this machine's memory (MemTotal)";
  const double limit = cgroup_limit_bytes();
  if (limit > 0 && (total < 0 || limit < total)) {
    total = limit;
    where = "this job's memory limit (its cgroup's)";
  }
  return total;
}

void check_memory_fits(const Config& config, const torch::Device& device, int64_t local_ranks) {
  const auto estimate = estimate_rank_memory(config, !(device.is_cuda() && config.model.dropout == 0));
  std::string where;
  double available = -1;
  int64_t ranks = local_ranks;
  if (estimate.parameters <= kMaxParameters) {
    if (!config.train.memory_check) return;
    if (device.is_cuda()) {
      available = static_cast<double>(cuda_runtime_total_memory(device.index()));
      where = "GPU " + std::to_string(device.index()) + "'s memory";
      ranks = 1;  // one GPU per rank
    } else {
      available = machine_memory_bytes(where);
    }
    if (available <= 0) return;  // nothing to compare with
  }
  const std::string refusal = memory_refusal(config, estimate, ranks, available, where);
  if (!refusal.empty()) throw InputError(refusal);
}

}  // namespace loom::launch
