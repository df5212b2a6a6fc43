#include "core/config_fields.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace loom {
namespace {

bool parse_int(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') {
    // Accept integral floats written as 1e3.
    double d = std::strtod(text.c_str(), &end);
    if (*end != '\0' || d != std::floor(d) || std::fabs(d) > 9e15) return false;
    value = static_cast<long long>(d);
  }
  out = value;
  return true;
}

bool parse_float(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value)) return false;
  out = value;
  return true;
}

bool parse_bool(const std::string& text, bool& out) {
  if (text == "true" || text == "True" || text == "1" || text == "yes") {
    out = true;
  } else if (text == "false" || text == "False" || text == "0" || text == "no") {
    out = false;
  } else {
    return false;
  }
  return true;
}

std::string print_float(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

template <typename Member>
ConfigField int_field(std::string section, std::string key, Member member) {
  return {section, key, "int",
          [member](Config& c, const std::string& t) { return parse_int(t, member(c)); },
          [member](const Config& c) { return std::to_string(member(c)); }};
}

template <typename Member>
ConfigField float_field(std::string section, std::string key, Member member) {
  return {section, key, "float",
          [member](Config& c, const std::string& t) { return parse_float(t, member(c)); },
          [member](const Config& c) { return print_float(member(c)); }};
}

template <typename Member>
ConfigField bool_field(std::string section, std::string key, Member member) {
  return {section, key, "bool",
          [member](Config& c, const std::string& t) { return parse_bool(t, member(c)); },
          [member](const Config& c) { return std::string(member(c) ? "true" : "false"); }};
}

template <typename Member>
ConfigField string_field(std::string section, std::string key, Member member) {
  return {section, key, "string",
          [member](Config& c, const std::string& t) {
            member(c) = t;
            return true;
          },
          [member](const Config& c) { return member(c); }};
}

#define LOOM_MEMBER(path) [](auto& c) -> auto& { return c.path; }

std::vector<ConfigField> make_fields() {
  return {
      int_field("model", "num_layers", LOOM_MEMBER(model.num_layers)),
      int_field("model", "hidden_size", LOOM_MEMBER(model.hidden_size)),
      int_field("model", "num_heads", LOOM_MEMBER(model.num_heads)),
      int_field("model", "ffn_hidden_size", LOOM_MEMBER(model.ffn_hidden_size)),
      int_field("model", "vocab_size", LOOM_MEMBER(model.vocab_size)),
      int_field("model", "seq_len", LOOM_MEMBER(model.seq_len)),
      float_field("model", "dropout", LOOM_MEMBER(model.dropout)),
      string_field("model", "init_from", LOOM_MEMBER(model.init_from)),
      int_field("model", "moe.num_experts", LOOM_MEMBER(model.moe.num_experts)),
      int_field("model", "moe.top_k", LOOM_MEMBER(model.moe.top_k)),
      int_field("model", "moe.every", LOOM_MEMBER(model.moe.every)),
      float_field("model", "moe.capacity_factor", LOOM_MEMBER(model.moe.capacity_factor)),
      float_field("model", "moe.aux_loss_coeff", LOOM_MEMBER(model.moe.aux_loss_coeff)),
      float_field("model", "moe.z_loss_coeff", LOOM_MEMBER(model.moe.z_loss_coeff)),
      float_field("model", "moe.router_jitter", LOOM_MEMBER(model.moe.router_jitter)),

      int_field("parallel", "tp", LOOM_MEMBER(parallel.tp)),
      int_field("parallel", "pp", LOOM_MEMBER(parallel.pp)),
      int_field("parallel", "dp", LOOM_MEMBER(parallel.dp)),
      int_field("parallel", "ep", LOOM_MEMBER(parallel.ep)),
      bool_field("parallel", "sequence_parallel", LOOM_MEMBER(parallel.sequence_parallel)),
      int_field("parallel", "virtual_stages", LOOM_MEMBER(parallel.virtual_stages)),
      string_field("parallel", "schedule", LOOM_MEMBER(parallel.schedule)),
      int_field("parallel", "zero_stage", LOOM_MEMBER(parallel.zero_stage)),
      string_field("parallel", "order", LOOM_MEMBER(parallel.order)),
      string_field("parallel", "backend", LOOM_MEMBER(parallel.backend)),
      float_field("parallel", "timeout_s", LOOM_MEMBER(parallel.timeout_s)),
      float_field("parallel", "bucket_mb", LOOM_MEMBER(parallel.bucket_mb)),
      string_field("parallel", "grad_reduce_dtype", LOOM_MEMBER(parallel.grad_reduce_dtype)),

      int_field("train", "steps", LOOM_MEMBER(train.steps)),
      int_field("train", "global_batch_size", LOOM_MEMBER(train.global_batch_size)),
      int_field("train", "micro_batch_size", LOOM_MEMBER(train.micro_batch_size)),
      float_field("train", "lr", LOOM_MEMBER(train.lr)),
      float_field("train", "min_lr", LOOM_MEMBER(train.min_lr)),
      int_field("train", "warmup_steps", LOOM_MEMBER(train.warmup_steps)),
      float_field("train", "weight_decay", LOOM_MEMBER(train.weight_decay)),
      float_field("train", "grad_clip", LOOM_MEMBER(train.grad_clip)),
      float_field("train", "adam_beta1", LOOM_MEMBER(train.adam_beta1)),
      float_field("train", "adam_beta2", LOOM_MEMBER(train.adam_beta2)),
      float_field("train", "adam_eps", LOOM_MEMBER(train.adam_eps)),
      int_field("train", "seed", LOOM_MEMBER(train.seed)),
      string_field("train", "precision", LOOM_MEMBER(train.precision)),
      float_field("train", "loss_scale", LOOM_MEMBER(train.loss_scale)),
      float_field("train", "initial_loss_scale", LOOM_MEMBER(train.initial_loss_scale)),
      int_field("train", "loss_scale_window", LOOM_MEMBER(train.loss_scale_window)),
      float_field("train", "min_loss_scale", LOOM_MEMBER(train.min_loss_scale)),
      int_field("train", "threads_per_rank", LOOM_MEMBER(train.threads_per_rank)),
      float_field("train", "peak_tflops", LOOM_MEMBER(train.peak_tflops)),
      string_field("train", "device", LOOM_MEMBER(train.device)),
      int_field("train", "exit_after", LOOM_MEMBER(train.exit_after)),
      string_field("train", "recompute", LOOM_MEMBER(train.recompute)),

      string_field("data", "path", LOOM_MEMBER(data.path)),
      string_field("data", "order", LOOM_MEMBER(data.order)),

      string_field("checkpoint", "dir", LOOM_MEMBER(checkpoint.dir)),
      int_field("checkpoint", "interval", LOOM_MEMBER(checkpoint.interval)),
      int_field("checkpoint", "keep", LOOM_MEMBER(checkpoint.keep)),

      int_field("log", "interval", LOOM_MEMBER(log.interval)),
      bool_field("log", "trace", LOOM_MEMBER(log.trace)),
  };
}

#undef LOOM_MEMBER

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> fields = make_fields();
  return fields;
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = static_cast<size_t>(-1);
  for (const auto& candidate : candidates) {
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace loom
