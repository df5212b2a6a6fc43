#include "core/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "core/errors.h"

namespace loom {

MetricsWriter::MetricsWriter(const std::string& path, std::unique_ptr<TensorBoardWriter> tensorboard)
    : path_(path), out_(path, std::ios::app), tensorboard_(std::move(tensorboard)) {
  if (!out_) throw InputError("cannot write metrics file '" + path + "'");
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  // A full disk must not cut the record off while the run goes on as if nothing happened.
  if (!out_.flush()) {
    throw std::runtime_error("cannot write metrics file '" + path_ + "': " + std::strerror(errno) +
                             " (disk full?); the run stops rather than train on unrecorded");
  }
  if (!tensorboard_ || !record.contains("step") || !record.at("step").is_number_integer()) return;
  const auto scalars = scalars_of_record(record);
  if (!scalars.empty()) tensorboard_->write(record.at("step").get<int64_t>(), scalars);
}

namespace {

void add_if_number(Scalars& out, const nlohmann::json& object, const std::string& key, const std::string& tag,
                   double scale = 1.0) {
  if (!object.is_object()) return;
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return;
  out.emplace_back(tag, static_cast<float>(it->get<double>() * scale));
}

// The memory record is one object per rank; the largest rank is the one that runs out first.
void add_memory(Scalars& out, const nlohmann::json& memory) {
  const nlohmann::json ranks = memory.is_array() ? memory : nlohmann::json::array({memory});
  constexpr double kMiB = 1.0 / (1024.0 * 1024.0);
  for (const std::string part : {"params", "grads", "master", "optimizer", "activation_peak"}) {
    double largest = -1.0;
    for (const auto& rank : ranks) {
      if (!rank.is_object()) continue;
      const auto it = rank.find(part + "_bytes");
      if (it != rank.end() && it->is_number()) largest = std::max(largest, it->get<double>());
    }
    // -1 means "not measured" (the activation peak on a GPU).
    if (largest >= 0.0) out.emplace_back("memory/" + part + "_mib", static_cast<float>(largest * kMiB));
  }
}

void add_moe(Scalars& out, const nlohmann::json& moe) {
  add_if_number(out, moe, "aux_loss", "moe/aux_loss");
  add_if_number(out, moe, "z_loss", "moe/z_loss");
  add_if_number(out, moe, "max_imbalance", "moe/max_imbalance");
  add_if_number(out, moe, "dropped_tokens", "moe/dropped_tokens");
  if (!moe.is_object() || !moe.contains("imbalance") || !moe.contains("layers")) return;
  const auto& imbalance = moe.at("imbalance");
  const auto& layers = moe.at("layers");
  if (!imbalance.is_array() || !layers.is_array() || imbalance.size() != layers.size()) return;
  for (size_t i = 0; i < imbalance.size(); ++i) {
    if (imbalance[i].is_number() && layers[i].is_number_integer()) {
      out.emplace_back("moe/imbalance/layer_" + std::to_string(layers[i].get<int64_t>()),
                       static_cast<float>(imbalance[i].get<double>()));
    }
  }
}

}  // namespace

Scalars scalars_of_record(const nlohmann::json& record) {
  Scalars out;
  add_if_number(out, record, "loss", "train/loss");
  add_if_number(out, record, "avg_loss", "train/avg_loss");
  add_if_number(out, record, "lr", "train/lr");
  add_if_number(out, record, "grad_norm", "train/grad_norm");
  add_if_number(out, record, "loss_scale", "train/loss_scale");
  add_if_number(out, record, "val_loss", "val/loss");
  add_if_number(out, record, "val_ppl", "val/ppl");
  add_if_number(out, record, "tokens_per_s", "perf/tokens_per_s");
  add_if_number(out, record, "step_ms", "perf/step_ms");
  add_if_number(out, record, "checkpoint_ms", "perf/checkpoint_ms");
  if (record.contains("pipeline")) add_if_number(out, record.at("pipeline"), "bubble", "perf/pipeline_bubble");
  if (record.contains("memory")) add_memory(out, record.at("memory"));
  if (record.contains("moe")) add_moe(out, record.at("moe"));
  return out;
}

}  // namespace loom
