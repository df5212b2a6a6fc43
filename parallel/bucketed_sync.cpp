// ZeRO 0 and 1 (and every stage at dp = 1): gradients reduced in dp buckets
// while backward goes on; fp32 master weights under mixed precision.
#include <fstream>
#include <nlohmann/json.hpp>

#include "parallel/data_parallel.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_clip.h"
#include "parallel/gradient_sync.h"
#include "parallel/master_weights.h"

namespace loom::parallel {
namespace {

class BucketedSync : public GradientSync {
 public:
  BucketedSync(ProcessGroups& groups, const GradientSyncOptions& options)
      : groups_(groups),
        options_(options),
        // With one dp rank there is nothing to shard.
        zero_stage_(groups.dp_cp().size() > 1 ? options.zero_stage : 0) {}

  void attach(std::vector<ParallelParameter> params, std::vector<torch::Tensor> tied,
              const std::vector<int64_t>& /*block_of: buckets follow the order of use*/) override {
    params_ = std::move(params);
    if (options_.model_dtype != torch::kFloat) {
      std::vector<torch::Tensor> model;
      for (const auto& param : params_) model.push_back(param.tensor);
      master_ = std::make_unique<MasterWeights>(model, options_.model_dtype);
      for (size_t i = 0; i < params_.size(); ++i) params_[i].tensor = master_->masters()[i];
      for (auto& tensor : tied) tensor = master_->master_of(tensor);
    }
    // Parts: [0] every parameter but the experts, over dp; [1] MoE experts, over expert-dp.
    std::vector<torch::Tensor> sequence_parallel;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& param = params_[i];
      const size_t part = param.expert ? 1 : 0;
      parts_[part].index.push_back(i);
      parts_[part].tensors.push_back(param.tensor);
      if (param.sequence_parallel) sequence_parallel.push_back(param.tensor);
    }
    if (groups_.dp_cp().size() > 1) {
      // ZeRO-1 shards the buckets over ZeRO's shard groups (all of dp-cp unless HSDP). The buckets
      // are reduced over all of dp-cp (reduce-scattered into the shards, or all-reduced whole at
      // ZeRO-0 and for Muon): under HSDP inside the shard group and across the replicas;
      // compressed, over the whole group, which the compressor's exchange needs.
      const bool compressed = options_.compression.kind != GradCompression::none;
      auto& dense = compressed ? groups_.dp_cp() : groups_.dp_shard_gradients();
      auto& experts = compressed ? groups_.expert_dp_cp() : groups_.expert_dp_shard_gradients();
      const int64_t average_over = groups_.dp_cp().size();
      parts_[0].buckets =
          std::make_unique<GradientBuckets>(parts_[0].tensors, dense, options_.bucket_bytes, options_.micro_batches,
                                            zero_stage_, average_over, &groups_.dp_shard(), tied);
      // The tied copies' gradients change after backward (their sum): their buckets wait for finish().
      parts_[0].buckets->defer(tied);
      if (!parts_[1].tensors.empty()) {
        // Each expert's gradient already sums the tokens of its ep group's dp ranks: averaged over all of dp.
        parts_[1].buckets =
            std::make_unique<GradientBuckets>(parts_[1].tensors, experts, options_.bucket_bytes, options_.micro_batches,
                                              zero_stage_, average_over, &groups_.expert_dp_shard());
      }
    }
    for (auto& part : parts_) {
      if (!part.buckets) continue;
      if (options_.compression.kind != GradCompression::none) {
        part.buckets->compress(options_.compression);
        continue;  // (the compressor's exchange is its own, over the whole group)
      }
      if (options_.reduce_dtype != torch::kFloat) part.buckets->reduce_in(options_.reduce_dtype);
      if (zero_stage_ >= 1 && !options_.whole_gradients_needed) part.buckets->reduce_to_shards();
    }
    if (master_) {
      // Masters are outside autograd: their buckets hear of each gradient from the master weights.
      std::vector<std::pair<GradientBuckets*, size_t>> bucket_of;
      size_t index_in_part[2] = {0, 0};
      for (const auto& param : params_) {
        const size_t part = param.expert ? 1 : 0;
        bucket_of.emplace_back(parts_[part].buckets.get(), index_in_part[part]++);
      }
      master_->set_listener([bucket_of](size_t i) {
        if (auto* buckets = bucket_of[i].first) buckets->gradient_arrived(bucket_of[i].second);
      });
    }
    sequence_parallel_ = std::make_unique<GradientReducer>(sequence_parallel);
    tied_ = std::make_unique<GradientReducer>(tied);
    // Gradients exist from the start (AccumulateGrad then adds into them in place), so
    // the first step allocates only activations and temporaries, which the memory report measures.
    torch::NoGradGuard no_grad;
    for (auto& param : params_) {
      if (!param.tensor.grad().defined()) param.tensor.mutable_grad() = torch::zeros_like(param.tensor);
    }
  }

  std::vector<OptimizerPart> optimizer_parts() override {
    std::vector<OptimizerPart> parts;
    for (size_t p = 0; p < 2; ++p) {
      if (p == 1 && parts_[1].tensors.empty()) break;
      OptimizerPart part;
      part.index = parts_[p].index;
      part.group = p == 0 ? &groups_.dp_shard() : &groups_.expert_dp_shard();
      if (zero_stage_ >= 1) part.sharded_buckets = parts_[p].buckets.get();
      part.gradients_free = !parts_[p].buckets;
      parts.push_back(std::move(part));
    }
    return parts;
  }

  void start_step() override {
    for (auto& part : parts_) {
      if (part.buckets) part.buckets->start_step();
    }
  }

  void finish_backward() override {
    if (parts_[0].buckets) parts_[0].buckets->mark("backward done");
    // The first stage's embedding and the last stage's output layer are one tied
    // weight: each copy has half of its gradient. Their dp buckets are held back until this sum is in.
    if (!tied_->empty()) tied_->all_reduce(groups_.get(GroupKind::embedding));
    for (auto& part : parts_) {
      if (part.buckets) part.buckets->finish();
    }
    // Sequence-parallel ranks each saw part of the sequence: their gradients of
    // replicated parameters are partial sums. Summed after the dp reduction, which
    // may still be writing the buffers until finish().
    sequence_parallel_->all_reduce(groups_.tp());
  }

  void unscale(double inverse) override {
    torch::NoGradGuard no_grad;
    for (auto& p : params_) {
      if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(inverse);
    }
  }

  double clip(double max_norm) override {
    if (!reduced_to_shards()) {
      ExpertGroups experts;
      if (options_.experts) experts = {&groups_.ep(), nullptr};
      return clip_grad_norm(params_, max_norm, groups_.model_parallel(), groups_.coords().tp, nullptr, experts);
    }
    // ZeRO-1 reduced into shards: each rank's squares from its shards' pieces (every parameter
    // once: tp-replicated ones on tp rank 0, tied copies at their owner), summed over the shard
    // group, and the shards alone scaled (the optimizer reads nothing else).
    std::vector<torch::Tensor> grads, counted[2];
    for (size_t p = 0; p < 2; ++p) {
      const auto& part = parts_[p];
      if (!part.buckets) continue;
      for (int64_t b = 0; b < part.buckets->num_buckets(); ++b) {
        const auto& l = part.buckets->layout(static_cast<size_t>(b));
        grads.push_back(l.buffer.narrow(0, l.shard_begin, l.flat.shard_size()));
        for (size_t j = 0; j < l.params.size(); ++j) {
          const auto& param = params_[part.index[l.params[j]]];
          if (!param.counted_on(groups_.coords().tp)) continue;
          const auto [begin, end] = l.flat.in_shard(j, l.shard_begin);
          if (begin < end) counted[p].push_back(l.buffer.narrow(0, begin, end - begin));
        }
      }
    }
    ExpertGroups experts;
    if (parts_[1].buckets) experts = {&groups_.ep(), &groups_.expert_dp_shard()};
    return clip_sharded_grad_norm(counted[0], grads, max_norm, groups_.model_parallel(), groups_.dp_shard(), counted[1],
                                  experts);
  }

  std::vector<torch::Tensor> whole_gradients() override {
    if (!reduced_to_shards()) return GradientSync::whole_gradients();
    // Each bucket's reduced shards gathered from the group that shares them (collective).
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads(params_.size());
    for (size_t p = 0; p < 2; ++p) {
      const auto& part = parts_[p];
      if (!part.buckets) continue;
      auto& group = p == 0 ? groups_.dp_shard() : groups_.expert_dp_shard();
      for (int64_t b = 0; b < part.buckets->num_buckets(); ++b) {
        const auto& l = part.buckets->layout(static_cast<size_t>(b));
        auto whole = torch::empty_like(l.buffer);
        group.all_gather(whole, l.buffer.narrow(0, l.shard_begin, l.flat.shard_size()).contiguous()).wait();
        for (size_t j = 0; j < l.params.size(); ++j) {
          const auto i = part.index[l.params[j]];
          grads[i] = l.flat.view(whole, j, params_[i].tensor.sizes()).clone();
        }
      }
    }
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = torch::zeros_like(params_[i].tensor);
    return grads;
  }

  void after_update() override {
    if (master_) master_->copy_to_model();
  }

  void release_all(bool loaded) override {
    if (loaded && master_) master_->copy_to_model();
  }

  std::vector<torch::Tensor> compression_state() const override {
    std::vector<torch::Tensor> out;
    for (const auto& part : parts_) {
      if (!part.buckets) continue;
      for (auto& t : part.buckets->compression_state()) out.push_back(t);
    }
    return out;
  }

  bool set_compression_state(const std::vector<torch::Tensor>& tensors) override {
    size_t next = 0;
    for (const auto& part : parts_) {
      if (part.buckets && !part.buckets->compression_state_fits(tensors, next)) return false;
    }
    if (next != tensors.size()) return false;
    next = 0;
    for (auto& part : parts_) {
      if (part.buckets) part.buckets->set_compression_state(tensors, next);
    }
    return true;
  }

  void end_step(bool applied) override {
    for (auto& part : parts_) {
      if (part.buckets) part.buckets->end_compression_step(applied);
    }
  }

  void set_compression_reductions(int64_t done) override {
    for (auto& part : parts_) {
      if (part.buckets) part.buckets->set_compression_reductions(done);
    }
  }

  ModelStateBytes state_bytes() const override {
    ModelStateBytes bytes;
    for (const auto& p : params_) {
      bytes.params += static_cast<int64_t>(p.tensor.nbytes());
      if (!parts_[0].buckets && p.tensor.grad().defined())
        bytes.grads += static_cast<int64_t>(p.tensor.grad().nbytes());
    }
    // Under mixed precision params_ are the fp32 masters; the model holds the bf16 (fp16) copies.
    if (master_) {
      bytes.master = master_->master_bytes();
      bytes.params = master_->model_bytes();
    }
    for (const auto& part : parts_) {
      for (int64_t b = 0; part.buckets && b < part.buckets->num_buckets(); ++b) {
        bytes.grads += static_cast<int64_t>(part.buckets->layout(static_cast<size_t>(b)).buffer.nbytes());
      }
    }
    return bytes;
  }

  void write_trace(const std::filesystem::path& path, int64_t last_step) const override {
    const auto& buckets = parts_[0].buckets;
    if (!buckets) return;
    nlohmann::json events = nlohmann::json::array();
    for (const auto& e : buckets->trace()) events.push_back({{"event", e.what}, {"seconds", e.seconds}});
    std::ofstream(path)
        << nlohmann::json{{"step", last_step}, {"buckets", buckets->num_buckets()}, {"events", events}}.dump(1) << "\n";
  }

 private:
  struct Part {
    std::vector<size_t> index;  // its parameters' places in params_
    std::vector<torch::Tensor> tensors;
    std::unique_ptr<GradientBuckets> buckets;  // when dp > 1
  };

  // Whether ZeRO-1's buckets are reduce-scattered: each rank's reduced gradients are its shards only.
  bool reduced_to_shards() const { return parts_[0].buckets && parts_[0].buckets->reduces_to_shards(); }

  ProcessGroups& groups_;
  GradientSyncOptions options_;
  int64_t zero_stage_;
  Part parts_[2];
  std::unique_ptr<MasterWeights> master_;               // mixed precision
  std::unique_ptr<GradientReducer> sequence_parallel_;  // summed over tp
  std::unique_ptr<GradientReducer> tied_;               // summed over the embedding group
};

}  // namespace

std::unique_ptr<GradientSync> make_bucketed_sync(ProcessGroups& groups, const GradientSyncOptions& options) {
  return std::make_unique<BucketedSync>(groups, options);
}

}  // namespace loom::parallel
