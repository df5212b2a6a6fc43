#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/config_aliases.h"
#include "core/config_fields.h"
#include "core/errors.h"

namespace loom {
namespace {

std::vector<std::string> all_names() {
  std::vector<std::string> names;
  for (const auto& f : config_fields()) names.push_back(f.name());
  return names;
}

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const auto& f : config_fields()) {
    if (std::find(names.begin(), names.end(), f.section) == names.end()) names.push_back(f.section);
  }
  return names;
}

// "unknown key 'NAME'; did you mean ...?": Megatron-LM's name for the key if NAME is one, else the closest candidate.
std::string unknown(const std::string& what, const std::string& name, const std::vector<std::string>& candidates) {
  const std::string megatron = megatron_hint(name);
  if (!megatron.empty()) return "unknown key '" + name + "'; " + megatron;
  return "unknown " + what + " '" + name + "'; did you mean '" + closest_name(name, candidates) + "'?";
}

const ConfigField& find_field(const std::string& name, const std::string& where) {
  for (const auto& f : config_fields()) {
    if (f.name() == name) return f;
  }
  throw InputError(where + unknown("key", name, all_names()));
}

void set_field(Config& config, const std::string& name, const std::string& text, const std::string& where) {
  const ConfigField& field = find_field(name, where);
  if (!field.parse(config, text)) {
    throw InputError(where + "key '" + name + "' expects a " + field.type + ", got '" + text + "'");
  }
}

// The entries of MAP under the dotted PREFIX; a nested mapping (model.moe) adds a level.
void set_entries(Config& config, const std::string& prefix, const YAML::Node& map, const std::string& where) {
  for (const auto& entry : map) {
    const std::string name = prefix + "." + entry.first.as<std::string>();
    if (entry.second.IsMap()) {
      set_entries(config, name, entry.second, where);
      continue;
    }
    if (!entry.second.IsScalar() && !entry.second.IsNull()) {
      throw InputError(where + "key '" + name + "' must be a single value");
    }
    set_field(config, name, entry.second.IsNull() ? "" : entry.second.Scalar(), where);
  }
}

void require(bool ok, const std::string& key, const std::string& message) {
  if (!ok) throw InputError("config key '" + key + "': " + message);
}

}  // namespace

void apply_override(Config& config, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError("--set expects section.key=value, got '" + assignment + "'");
  }
  set_field(config, assignment.substr(0, eq), assignment.substr(eq + 1), "--set " + assignment + ": ");
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config config;
  config.source = path;
  std::ifstream probe(path);
  if (!probe) throw InputError("cannot read config file '" + path + "'");

  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw InputError("config file '" + path + "' is not valid YAML: " + e.what());
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw InputError("config file '" + path + "' must be a mapping of sections (model, parallel, train, ...)");

  const std::string where = path + ": ";
  for (const auto& section : root) {
    const std::string section_name = section.first.as<std::string>();
    auto sections = section_names();
    if (std::find(sections.begin(), sections.end(), section_name) == sections.end()) {
      throw InputError(where + unknown("section", section_name, sections));
    }
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap()) throw InputError(where + "section '" + section_name + "' must be a mapping");
    set_entries(config, section_name, section.second, where);
  }
  for (const auto& o : overrides) apply_override(config, o);
  return config;
}

namespace {

// "4 or 8 layers would split; so would pp * virtual_stages of 1, 2, 3 or 6".
std::string layer_split_hint(int64_t layers, int64_t chunks) {
  const int64_t below = layers / chunks * chunks, above = below + chunks;
  std::string hint = (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) +
                     " layers would split; so would pp * virtual_stages of ";
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= layers; ++d) {
    if (layers % d == 0) divisors.push_back(d);
  }
  for (size_t i = 0; i < divisors.size(); ++i) {
    hint += std::to_string(divisors[i]) + (i + 2 == divisors.size() ? " or " : i + 1 == divisors.size() ? "" : ", ");
  }
  return hint;
}

}  // namespace

void resolve_and_validate(Config& c, int64_t world) {
  const auto& m = c.model;
  require(m.num_layers >= 1, "model.num_layers", "must be at least 1");
  require(m.hidden_size >= 1, "model.hidden_size", "must be at least 1");
  require(m.num_heads >= 1, "model.num_heads", "must be at least 1");
  require(m.hidden_size % m.num_heads == 0, "model.hidden_size",
          std::to_string(m.hidden_size) + " is not divisible by model.num_heads=" + std::to_string(m.num_heads));
  require(m.ffn_hidden_size >= 0, "model.ffn_hidden_size", "must be 0 (meaning 4 * hidden_size) or positive");
  require(m.vocab_size >= 2, "model.vocab_size", "must be at least 2");
  require(m.seq_len >= 1, "model.seq_len", "must be at least 1");
  require(m.dropout >= 0.0 && m.dropout < 1.0, "model.dropout", "must be in [0, 1)");

  auto& p = c.parallel;
  require(world >= 1, "world", "must be at least 1");
  require(p.tp >= 1, "parallel.tp", "must be at least 1");
  require(p.pp >= 1, "parallel.pp", "must be at least 1");
  require(p.ep >= 1, "parallel.ep", "must be at least 1");
  require(world % (p.tp * p.pp) == 0, "parallel.tp",
          "world size " + std::to_string(world) + " is not divisible by tp * pp = " + std::to_string(p.tp * p.pp));
  const int64_t dp = world / (p.tp * p.pp);
  require(p.dp == 0 || p.dp == dp, "parallel.dp",
          "is " + std::to_string(p.dp) + " but world / (tp * pp) = " + std::to_string(dp) +
              "; omit it or set it to " + std::to_string(dp));
  p.dp = dp;
  require(dp % p.ep == 0, "parallel.ep", std::to_string(p.ep) + " does not divide dp = " + std::to_string(dp));
  const auto& moe = m.moe;
  require(moe.num_experts >= 0, "model.moe.num_experts", "must be 0 (no MoE) or positive");
  if (moe.enabled()) {
    require(moe.top_k >= 1 && moe.top_k <= moe.num_experts, "model.moe.top_k",
            "must be in [1, model.moe.num_experts = " + std::to_string(moe.num_experts) + "], got " +
                std::to_string(moe.top_k));
    require(moe.every >= 1 && moe.every <= m.num_layers, "model.moe.every",
            "must be in [1, model.num_layers = " + std::to_string(m.num_layers) + "], got " + std::to_string(moe.every));
    require(moe.capacity_factor >= 0, "model.moe.capacity_factor", "must be 0 (no dropping) or positive");
    require(moe.aux_loss_coeff >= 0, "model.moe.aux_loss_coeff", "must be non-negative");
    require(moe.z_loss_coeff >= 0, "model.moe.z_loss_coeff", "must be non-negative");
    require(moe.router_jitter >= 0 && moe.router_jitter < 1, "model.moe.router_jitter", "must be in [0, 1)");
    require(moe.num_experts % p.ep == 0, "model.moe.num_experts",
            std::to_string(moe.num_experts) + " experts cannot be spread evenly over parallel.ep = " +
                std::to_string(p.ep) + " ranks; use a multiple of " + std::to_string(p.ep));
    require(m.init_from.empty(), "model.init_from", "loads a dense GPT-2, which has no experts; unset model.moe.num_experts");
  } else {
    require(p.ep == 1, "parallel.ep",
            std::to_string(p.ep) + " needs experts to spread: set model.moe.num_experts (a multiple of " +
                std::to_string(p.ep) + ")");
  }
  require(m.num_heads % p.tp == 0, "model.num_heads",
          std::to_string(m.num_heads) + " is not divisible by parallel.tp=" + std::to_string(p.tp));
  require(c.ffn_size() % p.tp == 0, "model.ffn_hidden_size",
          std::to_string(c.ffn_size()) + " is not divisible by parallel.tp=" + std::to_string(p.tp));
  require(!p.sequence_parallel || p.tp > 1, "parallel.sequence_parallel", "needs parallel.tp > 1");
  require(!p.sequence_parallel || m.seq_len % p.tp == 0, "model.seq_len",
          std::to_string(m.seq_len) + " is not divisible by parallel.tp=" + std::to_string(p.tp) +
              " (needed by sequence_parallel)");
  require(p.virtual_stages >= 1, "parallel.virtual_stages", "must be at least 1");
  require(m.num_layers % (p.pp * p.virtual_stages) == 0, "model.num_layers",
          std::to_string(m.num_layers) + " layers cannot be split into pp * virtual_stages = " +
              std::to_string(p.pp * p.virtual_stages) + " equal chunks; " + layer_split_hint(m.num_layers, p.pp * p.virtual_stages));
  require(p.schedule == "gpipe" || p.schedule == "1f1b" || p.schedule == "interleaved", "parallel.schedule",
          "must be gpipe, 1f1b or interleaved, got '" + p.schedule + "'");
  require(p.schedule != "interleaved" || p.virtual_stages > 1, "parallel.virtual_stages",
          "the interleaved schedule needs virtual_stages of 2 or more (1 is plain 1f1b)");
  require(p.schedule != "interleaved" || p.pp > 1, "parallel.pp", "the interleaved schedule needs pp of 2 or more");
  require(p.virtual_stages == 1 || p.schedule == "interleaved", "parallel.schedule",
          "virtual_stages = " + std::to_string(p.virtual_stages) + " needs the interleaved schedule, not '" +
              p.schedule + "'");
  require(p.zero_stage >= 0 && p.zero_stage <= 3, "parallel.zero_stage", "must be 0, 1, 2 or 3");
  require(p.backend == "auto" || p.backend == "gloo" || p.backend == "nccl", "parallel.backend",
          "must be auto, gloo or nccl, got '" + p.backend + "'");
  require(p.timeout_s > 0, "parallel.timeout_s", "must be positive");
  require(p.bucket_mb >= 0, "parallel.bucket_mb", "must be 0 (one bucket) or positive");
  require(p.grad_reduce_dtype == "fp32" || p.grad_reduce_dtype == "bf16", "parallel.grad_reduce_dtype",
          "must be fp32 or bf16, got '" + p.grad_reduce_dtype + "'");

  auto& t = c.train;
  require(t.steps >= 1, "train.steps", "must be at least 1");
  require(t.micro_batch_size >= 1, "train.micro_batch_size", "must be at least 1");
  require(t.global_batch_size >= 1, "train.global_batch_size", "must be at least 1");
  require(t.global_batch_size % (t.micro_batch_size * dp) == 0, "train.global_batch_size",
          std::to_string(t.global_batch_size) + " is not divisible by micro_batch_size * dp = " +
              std::to_string(t.micro_batch_size) + " * " + std::to_string(dp) + "; use a multiple of " +
              std::to_string(t.micro_batch_size * dp));
  const int64_t micro_batches = t.global_batch_size / (t.micro_batch_size * dp);
  require(p.pp == 1 || micro_batches >= p.pp, "train.global_batch_size",
          std::to_string(t.global_batch_size) + " gives " + std::to_string(micro_batches) +
              " micro-batches per step (global_batch_size / (micro_batch_size * dp)), fewer than parallel.pp = " +
              std::to_string(p.pp) + ", so stages would stand idle; use at least " +
              std::to_string(p.pp * t.micro_batch_size * dp));
  require(p.schedule != "interleaved" || micro_batches % p.pp == 0, "train.global_batch_size",
          std::to_string(t.global_batch_size) + " gives " + std::to_string(micro_batches) +
              " micro-batches per step; the interleaved schedule needs a multiple of parallel.pp = " +
              std::to_string(p.pp) + " (global_batch_size a multiple of " +
              std::to_string(p.pp * t.micro_batch_size * dp) + ")");
  require(t.lr > 0, "train.lr", "must be positive");
  require(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", "must be in [0, train.lr]");
  require(t.warmup_steps >= 0 && t.warmup_steps <= t.steps, "train.warmup_steps", "must be in [0, train.steps]");
  require(t.weight_decay >= 0, "train.weight_decay", "must be non-negative");
  require(t.grad_clip >= 0, "train.grad_clip", "must be non-negative (0 turns clipping off)");
  require(t.adam_beta1 >= 0 && t.adam_beta1 < 1, "train.adam_beta1", "must be in [0, 1)");
  require(t.adam_beta2 >= 0 && t.adam_beta2 < 1, "train.adam_beta2", "must be in [0, 1)");
  require(t.adam_eps > 0, "train.adam_eps", "must be positive");
  require(t.seed >= 0, "train.seed", "must be non-negative");
  require(t.precision == "fp32" || t.precision == "bf16" || t.precision == "fp16", "train.precision",
          "must be fp32, bf16 or fp16, got '" + t.precision + "'");
  require(t.loss_scale >= 0, "train.loss_scale", "must be 0 (dynamic) or a positive fixed scale");
  require(t.initial_loss_scale > 0, "train.initial_loss_scale", "must be positive");
  require(t.loss_scale_window >= 1, "train.loss_scale_window", "must be at least 1");
  require(t.min_loss_scale > 0 && t.min_loss_scale <= t.initial_loss_scale, "train.min_loss_scale",
          "must be positive and at most train.initial_loss_scale");
  require(t.threads_per_rank >= 0, "train.threads_per_rank", "must be 0 (automatic) or positive");
  require(t.peak_tflops >= 0.0, "train.peak_tflops", "must be 0 (the device's known peak, if any) or positive");
  require(t.device == "auto" || t.device == "cpu" || t.device == "cuda", "train.device",
          "must be auto, cpu or cuda, got '" + t.device + "'");
  require(t.recompute == "none" || t.recompute == "full" || t.recompute == "selective", "train.recompute",
          "must be none, full or selective, got '" + t.recompute + "'");
  require(t.exit_after >= -1 && t.exit_after <= t.steps, "train.exit_after",
          "must be -1 (never) or a step in [0, train.steps], got " + std::to_string(t.exit_after));
  require(t.exit_after < 0 || !c.checkpoint.dir.empty(), "checkpoint.dir",
          "is needed by train.exit_after (it saves before exiting)");
  require(c.checkpoint.interval == 0 || !c.checkpoint.dir.empty(), "checkpoint.dir",
          "is needed by checkpoint.interval > 0");

  require(c.data.order == "sequential" || c.data.order == "shuffled", "data.order",
          "must be sequential or shuffled, got '" + c.data.order + "'");
  require(c.checkpoint.interval >= 0, "checkpoint.interval", "must be non-negative");
  require(c.checkpoint.keep >= 1, "checkpoint.keep", "must be at least 1");
  require(c.log.interval >= 1, "log.interval", "must be at least 1");
}

std::string to_yaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string section, subsection;  // a key "moe.top_k" sits in the mapping "moe" of its section
  for (const auto& f : config_fields()) {
    const auto dot = f.key.find('.');
    const std::string sub = dot == std::string::npos ? "" : f.key.substr(0, dot);
    if (f.section != section || sub != subsection) {
      if (!subsection.empty()) out << YAML::EndMap;
      if (f.section != section) {
        if (!section.empty()) out << YAML::EndMap;
        section = f.section;
        out << YAML::Key << section << YAML::Value << YAML::BeginMap;
      }
      subsection = sub;
      if (!sub.empty()) out << YAML::Key << sub << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << (sub.empty() ? f.key : f.key.substr(dot + 1)) << YAML::Value;
    if (f.type == "string") {
      out << YAML::DoubleQuoted << f.print(config);
    } else {
      out << f.print(config);
    }
  }
  if (!subsection.empty()) out << YAML::EndMap;
  if (!section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace loom
