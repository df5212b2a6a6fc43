#include "core/config_inert.h"

#include "core/config_fields.h"
#include "core/data_blend.h"
#include "core/errors.h"

namespace loom {
namespace {

// A family of keys (by prefix, or one key), whether the rest of the config turns it off, and why.
struct Rule {
  std::string prefix;
  bool off;
  std::string because;
  bool exact = false;  // the key itself only, not the keys it is a prefix of

  bool turns_off(const std::string& key) const { return off && (exact ? key == prefix : key.rfind(prefix, 0) == 0); }
};

std::vector<Rule> rules_of(const Config& config) {
  const auto& t = config.train;
  const auto& p = config.parallel;
  const bool fp16 = t.precision == TrainPrecision::fp16;
  const std::string precision = "train.precision is " + to_string(t.precision);
  // Evaluations need validation data: data.valid_path, or a validation part of data.split.
  bool validates = !config.data.valid_path.empty();
  try {
    validates = validates || (!config.data.split.empty() && parse_split(config.data.split, "data.split").valid > 0.0);
  } catch (const InputError&) {
    validates = true;  // a bad split is refused where it is read, not guessed at here
  }
  const auto& scaling = config.model.rope_scaling;
  const bool llama3 = scaling.type == RopeScalingKind::llama3, yarn = scaling.type == RopeScalingKind::yarn;
  const std::string scaling_type = "model.rope_scaling.type is " + to_string(scaling.type);
  return {
      {"train.muon.", t.optimizer != OptimizerKind::muon, "train.optimizer is " + to_string(t.optimizer)},
      {"train.loss_scale", !fp16, precision},  // (and train.loss_scale_window)
      {"train.initial_loss_scale", !fp16, precision},
      {"train.min_loss_scale", !fp16, precision},
      {"train.lr_wsd_decay_steps", t.lr_decay_style != LrDecayStyle::wsd,
       "train.lr_decay_style is " + to_string(t.lr_decay_style)},
      {"parallel.powersgd.", p.grad_compression != GradCompression::powersgd,
       "parallel.grad_compression is " + to_string(p.grad_compression)},
      {"parallel.grad_compression_error_feedback", p.grad_compression == GradCompression::none,
       "parallel.grad_compression is none"},
      {"model.mtp.loss_weight", config.model.mtp.depth == 0, "model.mtp.depth is 0"},
      {"model.rope_theta", config.model.position != PositionKind::rope,
       "model.position is " + to_string(config.model.position)},
      {"model.rope_scaling.", config.model.position != PositionKind::rope,
       "model.position is " + to_string(config.model.position)},
      {"model.rope_scaling.", scaling.type == RopeScalingKind::none, scaling_type},
      {"model.rope_scaling.low_freq_factor", !llama3, scaling_type},  // Llama 3's alone
      {"model.rope_scaling.high_freq_factor", !llama3, scaling_type},
      {"model.rope_scaling.beta_", !yarn, scaling_type},  // YaRN's alone
      {"model.rope_scaling.mscale", !yarn, scaling_type, true},
      {"model.rope_scaling.attention_factor", !yarn, scaling_type},
      {"model.mla.", !config.model.mla.enabled(), "model.mla.kv_lora_rank is 0 (no latent attention)"},
      {"model.moe.aux_loss_coeff", config.model.moe.aux_loss_type == "none", "model.moe.aux_loss_type is none"},
      {"train.lr_decay_steps", t.lr_decay_style == LrDecayStyle::constant, "train.lr_decay_style is constant"},
      {"train.min_lr", t.lr_decay_style == LrDecayStyle::constant, "train.lr_decay_style is constant"},
      {"model.moe.", !config.model.moe.enabled(), "model.moe.num_experts is 0 (a dense model)"},
      {"parallel.cp_comm", p.cp == 1, "parallel.cp is 1"},
      {"checkpoint.keep", config.checkpoint.dir.empty(), "checkpoint.dir is not set"},
      {"checkpoint.async", config.checkpoint.dir.empty(), "checkpoint.dir is not set"},
      {"data.eod_id", !config.data.eod_mask_loss, "data.eod_mask_loss is false"},
      {"eval.", !validates,
       "there is no validation data (data.valid_path is empty, data.split has no validation part)"},
  };
}

}  // namespace

bool has_no_effect(const Config& config, const std::string& key) {
  for (const auto& rule : rules_of(config))
    if (rule.turns_off(key)) return true;
  return false;
}

std::vector<std::string> inert_key_warnings(const Config& config) {
  const auto rules = rules_of(config);
  // Only a key set to another value than its default: a run's resolved config.yaml names every key.
  const Config defaults;
  const auto differs = [&](const std::string& key) {
    for (const auto& field : config_fields())
      if (field.name() == key) return field.print(config) != field.print(defaults);
    return true;
  };
  std::vector<std::string> warnings;
  for (const auto& key : config.set_keys) {
    if (key == "model.moe.num_experts" || !differs(key)) continue;  // (the key that decides; a default)
    for (const auto& rule : rules) {
      if (rule.turns_off(key)) {
        warnings.push_back(key + " is set, but " + rule.because + ": it has no effect");
        break;
      }
    }
  }
  return warnings;
}

}  // namespace loom
