// ZeRO 2 and 3 at dp > 1: per-block units that reduce-scatter gradients into
// shards (and, at stage 3, gather parameters around each block's use). Under
// mixed precision the units keep fp32 master shards beside the 16-bit model.
#include "parallel/data_parallel.h"
#include "parallel/grad_clip.h"
#include "parallel/gradient_sync.h"

namespace loom::parallel {
namespace {

class UnitShardedSync : public GradientSync {
 public:
  UnitShardedSync(ProcessGroups& groups, const GradientSyncOptions& options) : groups_(groups), options_(options) {
    parts_[0].units = std::make_unique<FullyShardedParameters>();
    if (options.experts) {
      parts_[1].units = std::make_unique<FullyShardedParameters>();
      parts_[0].units->chain(parts_[1].units.get());  // experts' units run inside their block's
    }
  }

  FullyShardedParameters* units() override { return parts_[0].units.get(); }

  void attach(std::vector<ParallelParameter> params, std::vector<torch::Tensor> tied,
              const std::vector<int64_t>& block_of_param) override {
    params_ = std::move(params);
    TORCH_CHECK(block_of_param.empty() || block_of_param.size() == params_.size(),
                "UnitShardedSync::attach: ", block_of_param.size(), " block indices for ", params_.size(),
                " parameters");
    // Parts: [0] every parameter but the experts, over dp; [1] MoE experts, over expert-dp.
    std::vector<torch::Tensor> tensors[2];
    std::vector<int64_t> block_of[2];
    for (size_t i = 0; i < params_.size(); ++i) {
      const size_t part = params_[i].expert ? 1 : 0;
      parts_[part].index.push_back(i);
      tensors[part].push_back(params_[i].tensor);
      block_of[part].push_back(block_of_param.empty() ? -1 : block_of_param[i]);
    }
    const bool shard_parameters = options_.zero_stage == 3;
    for (auto& part : parts_) {
      if (part.units && options_.split_backward) part.units->hold_gradients_for_step();
    }
    // Units shard over ZeRO's shard groups (all of dp-cp unless HSDP, whose reduce-scatters also
    // sum over the replicas) and average over all of dp-cp.
    const int64_t average_over = groups_.dp_cp().size();
    parts_[0].units->shard(tensors[0], block_of[0], groups_.dp_shard_gradients(), shard_parameters, average_over,
                           options_.model_dtype);
    if (parts_[1].units) {
      // Experts are sharded over expert-dp but averaged over all of dp.
      parts_[1].units->shard(tensors[1], block_of[1], groups_.expert_dp_shard_gradients(), shard_parameters,
                             average_over, options_.model_dtype);
    }
    auto& dense = *parts_[0].units;
    if (dense.mixed()) {
      // Gradient reduction, clipping and the optimizer use the units' fp32 shards; checkpoints
      // read and write whole fp32 masters, which the units gather around them.
      // The tied embedding's sum over the embedding group works on fp32 views of its gradient.
      for (auto& tensor : tied) {
        for (size_t i = 0; i < dense.params().size(); ++i) {
          if (!dense.params()[i].is_same(tensor)) continue;
          tensor = dense.master_views()[i];
          tied_in_units_.emplace_back(i, tensor);
          break;
        }
      }
      for (auto& part : parts_) {
        if (!part.units) continue;
        const auto views = part.units->master_views();
        for (size_t i = 0; i < part.index.size(); ++i) params_[part.index[i]].tensor = views[i];
      }
    }
    tied_ = std::make_unique<GradientReducer>(tied);
  }

  std::vector<OptimizerPart> optimizer_parts() override {
    std::vector<OptimizerPart> parts;
    for (size_t p = 0; p < 2; ++p) {
      if (!parts_[p].units || parts_[p].index.empty()) continue;
      OptimizerPart part;
      part.index = parts_[p].index;
      part.group = p == 0 ? &groups_.dp_shard() : &groups_.expert_dp_shard();
      part.units = parts_[p].units.get();  // (each unit allocates its gradients when backward reaches it)
      parts.push_back(std::move(part));
    }
    return parts;
  }

  void start_step() override {
    for_each_units([](FullyShardedParameters& units) { units.start_step(); });
  }

  void finish_backward() override {
    auto& dense = *parts_[0].units;
    // The units add mixed-precision gradients into fp32 buffers: the tied sum works on those.
    for (auto& [i, view] : tied_in_units_) view.mutable_grad() = dense.gradient_of(i);
    if (!tied_->empty()) tied_->all_reduce(groups_.get(GroupKind::embedding));
    for (auto& [i, view] : tied_in_units_) view.mutable_grad() = torch::Tensor();  // the unit owns the buffer
    for_each_units([](FullyShardedParameters& units) { units.finish(); });
    // Sequence-parallel gradients are partial sums over tp; tp peers' units are laid
    // out alike, so their shards hold the same parameters' pieces.
    std::vector<torch::Tensor> pieces;
    for (auto& part : parts_) {
      if (!part.units) continue;
      auto mine = part.units->shard_grad_pieces([&](size_t i) { return params_[part.index[i]].sequence_parallel; });
      pieces.insert(pieces.end(), mine.begin(), mine.end());
    }
    all_reduce_pieces(pieces, groups_.tp());
  }

  void unscale(double inverse) override {
    torch::NoGradGuard no_grad;
    for_each_units([&](FullyShardedParameters& units) {
      for (auto& u : units.units()) u.shard_grad.mul_(inverse);
    });
  }

  double clip(double max_norm) override {
    std::vector<torch::Tensor> grads, counted[2];
    for (size_t p = 0; p < 2; ++p) {
      auto& part = parts_[p];
      if (!part.units) continue;
      for (const auto& u : part.units->units()) grads.push_back(u.shard_grad);
      // Every parameter once: tp-replicated ones on tp rank 0, tied copies at their owner.
      counted[p] = part.units->shard_grad_pieces([&](size_t i) {
        const auto& param = params_[part.index[i]];
        return param.counted_on(groups_.coords().tp);
      });
    }
    ExpertGroups experts;
    // The shards' squares summed over a shard group (each replica holds the same shards).
    if (parts_[1].units) experts = {&groups_.ep(), &groups_.expert_dp_shard()};
    return clip_sharded_grad_norm(counted[0], grads, max_norm, groups_.model_parallel(), groups_.dp_shard(), counted[1],
                                  experts);
  }

  void after_update() override {
    for_each_units([](FullyShardedParameters& units) { units.gather_updated(); });
  }

  std::vector<torch::Tensor> whole_gradients() override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads(params_.size());
    for (size_t p = 0; p < 2; ++p) {
      auto& part = parts_[p];
      if (!part.units) continue;
      auto& group = p == 0 ? groups_.dp_shard() : groups_.expert_dp_shard();
      std::vector<torch::Tensor> whole;
      for (const auto& u : part.units->units()) {
        auto shard =
            u.shard_grad.defined() ? u.shard_grad.contiguous() : torch::zeros({u.flat.shard_size()}, u.shard.options());
        whole.push_back(torch::empty({u.flat.padded()}, shard.options()));
        group.all_gather(whole.back(), shard).wait();
      }
      for (size_t i = 0; i < part.index.size(); ++i) {
        const auto [unit, j] = part.units->where(i);
        const auto& param = params_[part.index[i]].tensor;
        grads[part.index[i]] = part.units->units()[unit].flat.view(whole[unit], j, param.sizes()).clone();
      }
    }
    return grads;
  }

  void gather_all() override {
    for_each_units([](FullyShardedParameters& units) { units.gather_all(); });
  }

  void release_all(bool loaded) override {
    for_each_units([&](FullyShardedParameters& units) { units.release_all(/*take_values=*/loaded); });
  }

  ModelStateBytes state_bytes() const override {
    // ZeRO-3: each rank holds its shards; whole units exist only while in use. ZeRO-2: whole
    // parameters. Under mixed precision the shards are the fp32 master weights.
    ModelStateBytes bytes;
    for (const auto& part : parts_) {
      if (!part.units) continue;
      for (const auto& u : part.units->units()) {
        if (!part.units->shards_parameters())
          bytes.params += static_cast<int64_t>(u.full.nbytes());  // (in fp32, the shard is part of it)
        if (part.units->mixed()) {
          bytes.master += static_cast<int64_t>(u.shard.nbytes());
        } else if (part.units->shards_parameters()) {
          bytes.params += static_cast<int64_t>(u.shard.nbytes());
        }
        bytes.grads += static_cast<int64_t>(u.shard_grad.nbytes());
      }
    }
    return bytes;
  }

 private:
  struct Part {
    std::unique_ptr<FullyShardedParameters> units;
    std::vector<size_t> index;  // its parameters' indices in params_
  };
  template <typename F>
  void for_each_units(F&& f) {
    for (auto& part : parts_) {
      if (part.units) f(*part.units);
    }
  }

  ProcessGroups& groups_;
  GradientSyncOptions options_;
  Part parts_[2];  // [0] dense, over dp; [1] MoE experts, over expert-dp
  // Mixed precision: the tied embedding's index in the dense units and the fp32 view its sum uses.
  std::vector<std::pair<size_t, torch::Tensor>> tied_in_units_;
  std::unique_ptr<GradientReducer> tied_;
};

}  // namespace

std::unique_ptr<GradientSync> make_unit_sharded_sync(ProcessGroups& groups, const GradientSyncOptions& options) {
  return std::make_unique<UnitShardedSync>(groups, options);
}

}  // namespace loom::parallel
