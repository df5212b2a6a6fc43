#include "launch/training_record.h"

#include <array>

#include "core/config_fields.h"
#include "core/config_inert.h"
#include "core/errors.h"
#include "core/loss_mask.h"

namespace loom::launch {
namespace {

// The keys whose change on a resume goes on silently otherwise. Not here: what a resume refuses to
// change (the model's shape, the router's choice, Muon's groups: launch/resume_checks.h), what does
// not change the numbers (the layout, recompute, micro_batch_size up to rounding), the learning-rate
// schedule (said by optim/lr_schedule.h) and the data (launch/data_record.h).
constexpr std::array kRecordedKeys = {
    "train.precision",
    "train.global_batch_size",
    "train.grad_clip",
    "train.weight_decay",
    "train.adam_beta1",
    "train.adam_beta2",
    "train.adam_eps",
    "train.loss_scale",
    "train.muon.lr",
    "train.muon.weight_decay",
    "train.muon.momentum",
    "train.muon.nesterov",
    "train.muon.ns_steps",
    "train.muon.ns_dtype",
    "parallel.grad_reduce_dtype",
    "model.dropout",
    "model.mtp.loss_weight",
    "model.moe.capacity_factor",
    "model.moe.aux_loss_coeff",
    "model.moe.aux_loss_type",
    "model.moe.z_loss_coeff",
    "model.moe.router_jitter",
    "model.moe.bias_update_rate",
    "data.eod_mask_loss",
    "data.eod_id",
};

}  // namespace

nlohmann::json training_settings_record(const Config& config) {
  nlohmann::json record = nlohmann::json::object();
  for (const auto& field : config_fields()) {
    for (const char* key : kRecordedKeys) {
      if (field.name() == key) record[key] = field.print(config);
    }
  }
  // The id the mask uses, not how it was given: -1 (the sidecars') and the sidecars' own id are one setting.
  try {
    if (const int64_t eod = resolve_eod_id(config); eod >= 0) record["data.eod_id"] = std::to_string(eod);
  } catch (const InputError&) {
    // (refused where the run starts)
  }
  return record;
}

std::string training_settings_change(const Config& config, const nlohmann::json& saved) {
  if (!saved.is_object()) return "";
  const nlohmann::json now = training_settings_record(config);
  std::string changed;
  for (const std::string key : kRecordedKeys) {  // in the list's order, not the record's (alphabetical)
    const auto& value = now.at(key);
    if (has_no_effect(config, key)) continue;  // (Muon's keys under AdamW, the loss scale outside fp16, ...)
    const auto was = saved.find(key);
    if (was == saved.end() || !was->is_string() || *was == value) continue;  // (a key recorded since: unknown)
    changed += (changed.empty() ? "" : ", ") + key + " " + was->get<std::string>() + " -> " + value.get<std::string>();
  }
  return changed;
}

}  // namespace loom::launch
