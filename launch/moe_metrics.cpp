#include "launch/moe_metrics.h"

#include <algorithm>
#include <numeric>

#include "core/errors.h"
#include "core/logging.h"

namespace loom::launch {

std::vector<int64_t> moe_layers(const Config& config) {
  std::vector<int64_t> layers;
  // Multi-token prediction's blocks follow the main ones (layers num_layers, ...).
  for (int64_t layer = 0; layer < config.model.num_layers + config.model.mtp.depth; ++layer) {
    if (models::is_moe_layer(config.model.moe, layer)) layers.push_back(layer);
  }
  return layers;
}

MoEMonitor::MoEMonitor(const Config& config, std::vector<models::MoEStats*> stats)
    : num_experts_(config.model.moe.num_experts),
      ep_(config.parallel.ep),
      layers_(moe_layers(config)),
      stats_(std::move(stats)),
      bias_update_rate_(config.model.moe.bias_update_rate) {
  if (config.model.moe.has_expert_bias())
    expert_bias_.assign(layers_.size(), std::vector<double>(static_cast<size_t>(num_experts_), 0.0));
}

void MoEMonitor::hand_out_expert_bias() {
  for (auto* s : stats_) {
    if (!s->expert_bias.defined()) continue;
    const auto i = static_cast<size_t>(std::find(layers_.begin(), layers_.end(), s->layer) - layers_.begin());
    const auto bias = torch::tensor(expert_bias_[i], torch::kFloat64).to(torch::kFloat32);
    torch::NoGradGuard no_grad;
    s->expert_bias.copy_(bias);
  }
}

void MoEMonitor::restore_expert_bias(const std::vector<std::vector<double>>& saved, const std::string& source) {
  if (saved.empty()) {  // saved without biases: a run that starts using them (balancing turned on) starts at zero
    if (!expert_bias_.empty()) info0("{} holds no expert biases: they start at zero", source);
    return;
  }
  if (expert_bias_.empty()) {
    throw InputError(source + " holds expert biases; the config has neither model.moe.bias_update_rate > 0 nor " +
                     "model.moe.expert_bias, and would route without them");
  }
  const bool fits = saved.size() == expert_bias_.size() &&
                    std::all_of(saved.begin(), saved.end(),
                                [&](const auto& layer) { return static_cast<int64_t>(layer.size()) == num_experts_; });
  if (!fits) {
    throw InputError(source + ": the checkpoint's expert biases are " + std::to_string(saved.size()) + " layers of " +
                     std::to_string(saved.front().size()) + ", the model has " + std::to_string(expert_bias_.size()) +
                     " MoE layers of " + std::to_string(num_experts_) + " experts");
  }
  expert_bias_ = saved;
  hand_out_expert_bias();
}

nlohmann::json MoEMonitor::collect(parallel::ProcessGroups& groups) {
  // One row per MoE layer: tokens per expert, dropped, aux loss, z-loss,
  // micro-batches; then each rank's all-to-all bytes sent and received.
  const int64_t row = num_experts_ + 4, layers = static_cast<int64_t>(layers_.size()), world = groups.world();
  auto all = torch::zeros({layers * row + 2 * world}, torch::kFloat64);
  double* v = all.data_ptr<double>();  // filled and read on the host: no tensor per value
  double* volume = v + layers * row;
  for (auto* s : stats_) {
    double* mine = v + (std::find(layers_.begin(), layers_.end(), s->layer) - layers_.begin()) * row;
    const auto counts = s->tokens_per_expert.to(torch::kCPU).contiguous();
    std::copy_n(counts.data_ptr<int64_t>(), num_experts_, mine);
    mine[num_experts_] = static_cast<double>(s->dropped);
    mine[num_experts_ + 1] = s->aux_loss.item<double>();
    mine[num_experts_ + 2] = s->z_loss.item<double>();
    mine[num_experts_ + 3] = static_cast<double>(s->micro_batches);
    volume[2 * groups.rank()] += static_cast<double>(s->volume.sent);
    volume[2 * groups.rank() + 1] += static_cast<double>(s->volume.received);
    s->reset();
  }
  groups.world_comm().all_reduce(all).wait();

  nlohmann::json record;
  std::vector<std::vector<double>> tokens;
  double aux = 0, z = 0, max_imbalance = 0;
  int64_t dropped = 0;
  nlohmann::json imbalance = nlohmann::json::array();
  for (int64_t i = 0; i < layers; ++i) {
    const double* r = v + i * row;
    std::vector<double> counts(r, r + num_experts_);
    const double mean = std::accumulate(counts.begin(), counts.end(), 0.0) / static_cast<double>(num_experts_);
    const double ratio = mean > 0 ? *std::max_element(counts.begin(), counts.end()) / mean : 0.0;
    imbalance.push_back(ratio);
    max_imbalance = std::max(max_imbalance, ratio);
    dropped += static_cast<int64_t>(r[num_experts_]);
    const double micro = std::max(1.0, r[num_experts_ + 3]);
    aux += r[num_experts_ + 1] / micro / static_cast<double>(layers);
    z += r[num_experts_ + 2] / micro / static_cast<double>(layers);
    tokens.push_back(counts);
  }
  nlohmann::json sent = nlohmann::json::array(), received = nlohmann::json::array();
  for (int64_t r = 0; r < world; ++r) {
    sent.push_back(static_cast<int64_t>(volume[2 * r]));
    received.push_back(static_cast<int64_t>(volume[2 * r + 1]));
  }
  record["layers"] = layers_;
  record["aux_loss"] = aux;  // mean over layers and micro-batches, before the coefficient
  record["z_loss"] = z;
  record["tokens_per_expert"] = tokens;
  record["imbalance"] = imbalance;
  record["max_imbalance"] = max_imbalance;
  record["dropped_tokens"] = dropped;
  record["all_to_all"] = {{"sent_bytes", sent}, {"received_bytes", received}};
  if (bias_update_rate_ > 0) {
    for (size_t i = 0; i < tokens.size(); ++i)
      models::update_expert_bias(expert_bias_[i], tokens[i], bias_update_rate_);
    hand_out_expert_bias();
  }
  const auto warnings = check_hot(layers_, tokens);
  if (groups.rank() == 0) {
    for (const auto& w : warnings) log::warn("{}", w);
  }
  record["hot_experts"] = warnings;
  return record;
}

std::vector<std::string> MoEMonitor::check_hot(const std::vector<int64_t>& layers,
                                               const std::vector<std::vector<double>>& tokens_per_expert) {
  std::vector<std::string> warnings;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& counts = tokens_per_expert[i];
    const double mean = std::accumulate(counts.begin(), counts.end(), 0.0) / static_cast<double>(counts.size());
    for (size_t e = 0; e < counts.size(); ++e) {
      int& streak = streak_[{layers[i], static_cast<int64_t>(e)}];
      streak = mean > 0 && counts[e] > kHotFactor * mean ? streak + 1 : 0;
      if (streak == kHotSteps) {
        // Under expert parallelism the rank holding it is the all-to-all's hot spot; at ep 1 there is
        // no all-to-all, only the imbalance of the experts' products.
        const char* consequence = ep_ > 1 ? "the ep rank holding it receives most of the all-to-all traffic (a hot "
                                            "spot, like one NIC at 90%)"
                                          : "its product is the layer's largest (parallel.ep is 1: no all-to-all)";
        warnings.push_back(
            fmt::format("MoE layer {}: expert {} received {:.0f} tokens, {:.1f}x the mean, for {} steps "
                        "in a row; {}",
                        layers[i], e, counts[e], counts[e] / mean, kHotSteps, consequence));
      }
    }
  }
  return warnings;
}

}  // namespace loom::launch
