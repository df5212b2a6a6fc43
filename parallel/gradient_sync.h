// How this rank's gradients become the global batch's mean gradients, whatever
// the ZeRO stage: one interface the trainer's step loop talks to, with two
// implementations.
//  - bucketed (ZeRO 0 and 1, and any stage at dp = 1): each parameter's .grad is a
//    view into a dp bucket that is all-reduced while backward goes on
//    (parallel/grad_buckets.h); under mixed precision the parameters the
//    optimizer sees are fp32 masters (parallel/master_weights.h).
//  - unit-sharded (ZeRO 2 and 3 at dp > 1): per-block units gather parameters and
//    reduce-scatter gradients into shards (parallel/fully_sharded.h); under mixed
//    precision the shards are the fp32 masters.
// MoE experts are a second part of either, reduced over expert-dp (and averaged over dp).
//
// The optimizer is not the synchronisation's: it is built outside (optim/make_adamw.h,
// launch/make_optimizer.h) over optimizer_parts(), which say where each gradient lies.
//
// A step: the optimizer's zero_grad() (the buckets' gradients accumulate until it),
// start_step(), forward and backward, finish_backward(), unscale() (fp16), clip(),
// the optimizer's step, after_update().
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "parallel/fully_sharded.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_compression.h"
#include "parallel/parallel_parameter.h"
#include "parallel/process_groups.h"

namespace loom::parallel {

struct GradientSyncOptions {
  int64_t zero_stage = 0;                          // parallel.zero_stage
  int64_t micro_batches = 1;                       // gradients each parameter receives per step
  int64_t bucket_bytes = 0;                        // dp buckets (parallel.bucket_mb)
  torch::ScalarType reduce_dtype = torch::kFloat;  // the dp buckets' wire (parallel.grad_reduce_dtype)
  torch::ScalarType model_dtype = torch::kFloat;   // bf16 or fp16: mixed precision, fp32 masters
  GradCompressionOptions compression;              // the dp buckets' all-reduce compressed (stages 0 and 1)
  // ZeRO-1 reduce-scatters each bucket into its rank's shard, unless a reader needs whole
  // gradients on every rank: Muon, whose owners orthogonalise whole matrices.
  bool whole_gradients_needed = false;
  bool experts = false;  // the model has MoE experts (ep group)
  // A zero-bubble schedule's W passes deliver weight gradients after their block's backward,
  // interleaved with other micro-batches' backwards: ZeRO-2/3 units then hold the whole step's
  // gradients and reduce them at its end (FullyShardedParameters::hold_gradients_for_step).
  bool split_backward = false;
};

// Bytes of model state one rank holds, for the memory report.
struct ModelStateBytes {
  int64_t params = 0;  // the model's parameters (under mixed precision its bf16 / fp16 copies)
  int64_t grads = 0;
  int64_t master = 0;  // fp32 master weights beside 16-bit parameters
};

// One part of the parameters as an optimizer sees it. At most one of BUCKETS and UNITS is set.
struct OptimizerPart {
  std::vector<size_t> index;      // its parameters' places in GradientSync::parameters()
  Communicator* group = nullptr;  // the data-parallel ranks that share them (dp or expert-dp)
  // ZeRO-1: the gradients, in these buckets, reduced in this rank's shard of each (whole under
  // Muon and compression: GradientBuckets::reduces_to_shards()); the optimizer's state is sharded
  // like them (each rank updating its shard of every bucket and all-gathering the rest).
  GradientBuckets* sharded_buckets = nullptr;
  // ZeRO-2/3: each rank holds its flat shard of every unit and that shard's gradient.
  FullyShardedParameters* units = nullptr;
  // No buckets (one dp rank): the optimizer may lay the gradients out flat for its own speed.
  bool gradients_free = false;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // ZeRO-2/3's units, which the model's declared blocks run through (nullptr: none).
  virtual FullyShardedParameters* units() { return nullptr; }
  // Takes this rank's parameters, as the model made and initialised them, the tied
  // copies summed over the embedding group after backward and, for ZeRO-3's units,
  // BLOCK_OF[i]: the layer of the block holding parameter i, -1 outside the blocks
  // (empty: no blocks, every parameter in one unit).
  virtual void attach(std::vector<ParallelParameter> params, std::vector<torch::Tensor> tied,
                      const std::vector<int64_t>& block_of = {}) = 0;
  // The parameters as the optimizer, clipping and checkpoints see them: the model's,
  // or their fp32 masters under mixed precision (attach() first).
  const std::vector<ParallelParameter>& parameters() const { return params_; }
  // What an optimizer updates: the parameters in parts that each one group shares, and how
  // their gradients lie. [0] every parameter but the MoE experts, over dp; [1] the experts,
  // over expert-dp (only when there are any). attach() first.
  virtual std::vector<OptimizerPart> optimizer_parts() = 0;

  virtual void start_step() = 0;
  // After this rank's backward: the tied copies summed, the dp reductions done and
  // averaged, sequence-parallel gradients summed over tp.
  virtual void finish_backward() = 0;
  // fp16: divides the reduced gradients by the loss scale.
  virtual void unscale(double inverse) = 0;
  // The global gradient norm (every rank alike); scales the gradients to MAX_NORM when above it (> 0).
  virtual double clip(double max_norm) = 0;
  // After the optimizer's step: the model's parameters take the updated values.
  virtual void after_update() = 0;

  // Around checkpoints: every parameter whole and readable (collective), then
  // released; LOADED: parameters() were written and the model takes their values.
  virtual void gather_all() {}
  virtual void release_all(bool loaded) = 0;

  // After finish_backward(): each parameter's reduced gradient, whole on this rank (its tp part of
  // it), as parameters() lists them (for `loom verify`). Under ZeRO-2/3 each unit's shards are
  // gathered from the group that shares them (collective); the bucketed form reads the .grads.
  virtual std::vector<torch::Tensor> whole_gradients();

  // parallel.grad_compression's state on this rank (error buffers, PowerSGD's Q), as tensors in a
  // fixed order, and back (a checkpoint of the same layout); empty without compression.
  virtual std::vector<torch::Tensor> compression_state() const { return {}; }
  // False, leaving the state as it is, when TENSORS are not this layout's (other buckets, sizes or
  // PowerSGD ranks: parallel.bucket_mb or parallel.powersgd.rank changed).
  virtual bool set_compression_state(const std::vector<torch::Tensor>& /*tensors*/) { return false; }
  // A checkpoint's compression state did not fit: the fresh one counts from the DONE steps resumed,
  // so that PowerSGD still starts at the run's powersgd.start_step.
  virtual void set_compression_reductions(int64_t /*done*/) {}
  // Once the world has judged the step: APPLIED (its update made) or skipped (an fp16 overflow or a
  // non-finite loss on any rank). Compression keeps this step's error and Q only when applied, so
  // that every copy of a parameter, in whatever bucket, keeps the same state.
  virtual void end_step(bool /*applied*/) {}

  virtual ModelStateBytes state_bytes() const = 0;
  // log.trace: this step's bucket events (bucketed only).
  virtual void write_trace(const std::filesystem::path&, int64_t /*last_step*/) const {}

 protected:
  std::vector<ParallelParameter> params_;
};

// The implementation for the layout: unit-sharded for ZeRO 2 and 3 at dp > 1, else bucketed.
std::unique_ptr<GradientSync> make_gradient_sync(ProcessGroups& groups, const GradientSyncOptions& options);
std::unique_ptr<GradientSync> make_bucketed_sync(ProcessGroups& groups, const GradientSyncOptions& options);
std::unique_ptr<GradientSync> make_unit_sharded_sync(ProcessGroups& groups, const GradientSyncOptions& options);

}  // namespace loom::parallel
