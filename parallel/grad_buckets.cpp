#include "parallel/grad_buckets.h"

#include <algorithm>
#include <optional>

#include "parallel/grad_hooks.h"

namespace loom::parallel {
GradientBuckets::GradientBuckets(std::vector<torch::Tensor> params, Communicator& dp, int64_t bucket_bytes,
                                 int64_t accumulations, int64_t zero_stage, int64_t average_over,
                                 const Communicator* shards, const std::vector<torch::Tensor>& own_buckets)
    : params_(std::move(params)),
      dp_(dp),
      accumulations_(accumulations),
      average_over_(average_over > 0 ? average_over : dp.size()) {
  bucket_of_.assign(params_.size(), 0);
  std::vector<int64_t> bytes;
  std::vector<bool> alone;
  for (const auto& p : params_) {
    bytes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
    alone.push_back(std::any_of(own_buckets.begin(), own_buckets.end(), [&p](const auto& t) { return t.is_same(p); }));
  }
  if (!shards) shards = &dp;
  torch::NoGradGuard no_grad;
  for (auto& group : plan(bytes, bucket_bytes, alone)) {
    Bucket bucket;
    auto& l = bucket.layout;
    std::vector<torch::Tensor> members;
    for (size_t i : group) members.push_back(params_[i]);
    // Sharded buckets split into dp equal contiguous ranges (Megatron-LM's distributed optimizer).
    l.flat = FlatLayout::of(members, zero_stage > 0 ? shards->size() : 1);
    l.buffer = torch::zeros({l.flat.padded()}, params_[group.front()].options());
    l.shard_begin = zero_stage > 0 ? l.flat.shard_begin(shards->rank()) : 0;
    for (size_t j = 0; j < group.size(); ++j) {
      auto& p = params_[group[j]];
      p.mutable_grad() = l.flat.view(l.buffer, j, p.sizes());
      bucket_of_[group[j]] = buckets_.size();
    }
    l.params = group;
    buckets_.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (auto accumulator = after_gradient_accumulated(params_[i], [this, i] { gradient_arrived(i); })) {
      accumulators_.push_back(std::move(accumulator));
    }
  }
  start_step();
}

GradientBuckets::~GradientBuckets() = default;

std::vector<std::vector<size_t>> GradientBuckets::plan(const std::vector<int64_t>& bytes_in_use_order,
                                                       int64_t bucket_bytes, const std::vector<bool>& alone) {
  // Reverse order of use: the last layers' gradients are ready first.
  // A parameter alone takes a bucket of its own where it comes, and the bucket being filled goes on
  // past it (a bucket's parameters need not be neighbours in the order of use).
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = 0;
  std::optional<size_t> filling;  // the bucket being filled, once there is one
  for (size_t i = bytes_in_use_order.size(); i-- > 0;) {
    if (i < alone.size() && alone[i]) {
      groups.push_back({i});
      continue;
    }
    const int64_t b = bytes_in_use_order[i];
    if (!filling || (bucket_bytes > 0 && bytes > 0 && bytes + b > bucket_bytes)) {
      filling = groups.size();
      groups.emplace_back();
      bytes = 0;
    }
    groups[*filling].push_back(i);
    bytes += b;
  }
  return groups;
}

void GradientBuckets::start_step() {
  for (auto& b : buckets_) {
    b.pending = static_cast<int64_t>(b.layout.params.size()) * accumulations_;
    b.launched = false;
  }
  trace_.clear();
  step_start_ = std::chrono::steady_clock::now();
}

void GradientBuckets::defer(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].is_same(p)) buckets_[bucket_of_[i]].deferred = true;
    }
  }
}

void GradientBuckets::mark(const std::string& event) {
  trace_.push_back({event, std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count()});
}

void GradientBuckets::reduce_in(torch::ScalarType wire_dtype) {
  for (auto& b : buckets_) {
    if (wire_dtype == b.layout.buffer.scalar_type()) {
      b.wire = torch::Tensor();
      continue;
    }
    b.wire = torch::empty(b.layout.buffer.sizes(), b.layout.buffer.options().dtype(wire_dtype));
  }
}

void GradientBuckets::compress(const GradCompressionOptions& options) {
  for (auto& b : buckets_) {
    b.wire = torch::Tensor();
    std::vector<BucketSlot> slots;
    for (size_t j = 0; j < b.layout.params.size(); ++j) {
      const auto& param = params_[b.layout.params[j]];
      slots.push_back({b.layout.flat.offset(j), param.sizes().vec(), parameter_key(param)});
    }
    b.compressor = std::make_unique<BucketCompressor>(options, std::move(slots), average_over_);
  }
}

std::vector<torch::Tensor> GradientBuckets::compression_state() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : buckets_) {
    if (!b.compressor) continue;
    for (auto& t : b.compressor->state()) out.push_back(t);
  }
  return out;
}

void GradientBuckets::end_compression_step(bool applied) {
  for (auto& b : buckets_) {
    if (b.compressor) b.compressor->end_step(applied);
  }
}

void GradientBuckets::set_compression_reductions(int64_t done) {
  for (auto& b : buckets_) {
    if (b.compressor) b.compressor->set_reductions(done);
  }
}

bool GradientBuckets::compression_state_fits(const std::vector<torch::Tensor>& tensors, size_t& next) const {
  for (const auto& b : buckets_) {
    if (b.compressor && !b.compressor->fits(tensors, next, b.layout.buffer.numel())) return false;
  }
  return true;
}

void GradientBuckets::set_compression_state(const std::vector<torch::Tensor>& tensors, size_t& next) {
  for (auto& b : buckets_) {
    if (b.compressor) b.compressor->set_state(tensors, next);
  }
}

void GradientBuckets::gradient_arrived(size_t param) {
  auto& bucket = buckets_[bucket_of_[param]];
  // One more arrival than expected would change a gradient already on the wire: a parameter that
  // reaches autograd both through a layer deferring its weight gradient (zb-h1's W pass) and
  // through another path arrives twice per micro-batch.
  TORCH_CHECK(bucket.pending > 0, "gradient bucket ", bucket_of_[param], ": parameter ", param,
              " got more gradients this step than its ", accumulations_,
              " micro-batches (a weight used both by a deferring linear layer and another path under a split "
              "backward?)");
  if (--bucket.pending == 0 && !bucket.launched && !bucket.deferred) launch(bucket_of_[param]);
}

void GradientBuckets::launch(size_t index) {
  auto& bucket = buckets_[index];
  bucket.launched = true;
  mark("bucket " + std::to_string(index) + " launched");
  if (bucket.compressor) {
    bucket.compressed = bucket.compressor->start(bucket.layout.buffer, dp_);
    return;
  }
  if (bucket.wire.defined()) {
    torch::NoGradGuard no_grad;
    bucket.wire.copy_(bucket.layout.buffer);
  }
  auto& buffer = bucket.wire.defined() ? bucket.wire : bucket.layout.buffer;
  if (to_shards_) {
    // In place: this rank's shard is its chunk of the bucket (equal shards, in rank order).
    bucket.handle =
        dp_.reduce_scatter(buffer.narrow(0, bucket.layout.shard_begin, bucket.layout.flat.shard_size()), buffer);
    return;
  }
  bucket.handle = dp_.all_reduce(buffer);
}

void GradientBuckets::reduce_to_shards() {
  to_shards_ = true;
}

void GradientBuckets::finish() {
  // Parameters that got no gradient this step leave their bucket short: send it anyway.
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!buckets_[i].launched) launch(i);
  }
  const double scale = 1.0 / static_cast<double>(average_over_);
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    if (bucket.compressed) {
      bucket.compressed();
      bucket.compressed = nullptr;
    }
    bucket.handle.wait();
    auto& l = bucket.layout;
    // Reduced into the shards: only this rank's holds the sum.
    auto reduced = [&](const torch::Tensor& t) {
      return to_shards_ ? t.narrow(0, l.shard_begin, l.flat.shard_size()) : t;
    };
    if (bucket.wire.defined()) reduced(l.buffer).copy_(reduced(bucket.wire));
    reduced(l.buffer).mul_(scale);
  }
  mark("reductions done");
}

}  // namespace loom::parallel
