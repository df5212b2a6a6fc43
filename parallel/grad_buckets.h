// Data-parallel gradient reduction that overlaps backward (DDP's buckets).
// Parameters are packed in reverse order of use into contiguous buckets of
// about bucket_mb, and each parameter's .grad is a view into its bucket, so
// autograd accumulates straight into the buffer that goes on the wire. A hook
// on each parameter's gradient accumulator counts the micro-batches whose
// gradient has arrived; when every parameter of a bucket has all of them (the
// last micro-batch of the step), the bucket's all-reduce (under ZeRO-1 its
// reduce-scatter into the ranks' shards) is launched asynchronously while
// backward goes on. finish() launches what is left, waits for everything and
// turns sums into means.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/flat_layout.h"
#include "parallel/grad_compression.h"

namespace loom::parallel {

class GradientBuckets {
 public:
  struct Event {
    std::string what;  // "bucket 0 launched", ...
    double seconds;    // since start_step()
  };

  // One bucket: parameter PARAMS[j] sits at FLAT.offset(j) of BUFFER. With ZeRO
  // the buffer is padded to a multiple of dp and this rank's shard is
  // [shard_begin, shard_begin + flat.shard_size()); without, one shard is all of it.
  struct Layout {
    torch::Tensor buffer;
    std::vector<size_t> params;
    FlatLayout flat;
    int64_t shard_begin = 0;
  };

  // PARAMS in order of use in forward. ACCUMULATIONS: gradients each
  // parameter receives per step (micro-batches). BUCKET_BYTES <= 0: one bucket.
  // ZERO_STAGE 1 pads each bucket into dp equal shards for the sharded
  // optimizer (ZeRO-2 and 3 work by units: parallel/fully_sharded.h).
  // AVERAGE_OVER: the sums are divided by this (0: the group's size). MoE
  // experts reduce over expert-dp but average over all of dp: each expert's
  // gradient already sums the tokens of the ep group's dp ranks.
  // Parameters outside autograd (fp32 master weights) have no accumulator to
  // hook: whoever fills their gradient calls gradient_arrived().
  // SHARDS: the group ZeRO-1's shards are laid out over (HSDP's shard group; null: DP itself).
  // OWN_BUCKETS: parameters (of PARAMS) that each get a bucket of their own: the tied embedding's
  // copies at pp > 1, which must be reduced alike in the first and last stages (plan()).
  GradientBuckets(std::vector<torch::Tensor> params, Communicator& dp, int64_t bucket_bytes, int64_t accumulations,
                  int64_t zero_stage = 0, int64_t average_over = 0, const Communicator* shards = nullptr,
                  const std::vector<torch::Tensor>& own_buckets = {});
  // Reduce in WIRE_DTYPE (bf16: parallel.grad_reduce_dtype) instead of the buffers' dtype.
  void reduce_in(torch::ScalarType wire_dtype);
  // ZeRO-1 (Megatron-LM's distributed optimizer): each bucket reduce-scattered into this rank's
  // shard, which alone its optimizer reads, instead of all-reduced whole: the shard group's
  // traffic of DDP, not half as much again. After finish() only the shard holds the reduced
  // mean; the rest of the buffer keeps this rank's own sums.
  void reduce_to_shards();
  bool reduces_to_shards() const { return to_shards_; }
  // parallel.grad_compression: each bucket's all-reduce compressed, with its own state
  // (parallel/grad_compression.h). Replaces reduce_in().
  void compress(const GradCompressionOptions& options);
  // The compressors' state, every bucket's in turn (empty: none), and back.
  std::vector<torch::Tensor> compression_state() const;
  void set_compression_state(const std::vector<torch::Tensor>& tensors, size_t& next);
  // A fresh compression state in a run resumed after DONE steps (BucketCompressor::set_reductions).
  void set_compression_reductions(int64_t done);
  // Whether this step's update was applied: only then is its compression state kept.
  void end_compression_step(bool applied);
  // Whether TENSORS from NEXT on are this object's compression state (the same buckets, sizes and
  // ranks); moves NEXT past it when they are.
  bool compression_state_fits(const std::vector<torch::Tensor>& tensors, size_t& next) const;
  // Parameter I's gradient of one micro-batch is in its .grad.
  void gradient_arrived(size_t param);
  const Layout& layout(size_t bucket) const { return buckets_[bucket].layout; }
  // Holds back the buckets holding any of PARAMS until finish(): their
  // gradients still change after backward (the tied embedding is summed over
  // the embedding group first), so their reduction must not start early.
  void defer(const std::vector<torch::Tensor>& params);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Which parameters share a bucket, given their bytes in order of use:
  // buckets fill in reverse order, each closed before it would pass BUCKET_BYTES.
  // A parameter with ALONE[i] set gets a bucket of its own. A parameter held by two ranks of
  // different dp groups (the tied embedding in the first and last pipeline stages) is summed in
  // the same order by both only at the same offset of a bucket of the same size: a ring sums each
  // chunk of a bucket from another rank, so its neighbours in the bucket would set its bits.
  static std::vector<std::vector<size_t>> plan(const std::vector<int64_t>& bytes_in_use_order, int64_t bucket_bytes,
                                               const std::vector<bool>& alone = {});

  void start_step();
  // Records EVENT in this step's trace (the trainer marks the end of backward).
  void mark(const std::string& event);
  // Launches the buckets not yet launched, waits for all, divides by the averaging size.
  void finish();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  const std::vector<Event>& trace() const { return trace_; }

 private:
  struct Bucket {
    Layout layout;
    torch::Tensor wire;   // the buffer in the reduction's dtype, when it differs
    int64_t pending = 0;  // parameter-accumulations still to arrive this step
    CommHandle handle;
    std::unique_ptr<BucketCompressor> compressor;
    std::function<void()> compressed;  // finishes the compressed reduction in flight
    bool launched = false;
    bool deferred = false;
  };
  void launch(size_t bucket);

  std::vector<torch::Tensor> params_;
  Communicator& dp_;
  int64_t accumulations_;
  int64_t average_over_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: params hold them weakly
  std::vector<Event> trace_;
  std::chrono::steady_clock::time_point step_start_;
  bool to_shards_ = false;
};

}  // namespace loom::parallel
