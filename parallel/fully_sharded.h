// ZeRO-3 / FSDP: parameters sharded over dp. Each unit (a transformer block,
// or the rest of a rank's model: embeddings, final norm, output layer) keeps
// one equal contiguous shard of its flattened, padded parameters per dp rank
// (Megatron-LM's distributed-optimizer shape). A block's parameters are
// all-gathered just before its forward, freed after it, gathered again when
// backward reaches the block (a gate on its output), and its gradients are
// reduce-scattered into the shard as soon as the block's backward is done;
// the next block's gather is launched while the current one computes. The rest
// (the root unit) is gathered at the start of a step and reduced at its end:
// the tied embedding is used at both ends of the model.
//
// Freeing resizes the storage of the unit's flat buffer to zero: the
// parameters (views into it) and what autograd saved of them keep their
// shapes and get their bytes back when the unit is gathered again.
//
// ZeRO-2 uses the same units with the parameters kept whole: only the
// gradients are reduce-scattered block by block (and their whole buffers
// freed), and the updated shards are all-gathered after the optimizer step.
//
// Under mixed precision the whole parameters are bf16 (fp16) and the shards
// fp32 master weights: gathers send the shards rounded to the model's dtype,
// each micro-batch's gradients are added into an fp32 buffer as they arrive
// (reduced in fp32), and checkpoints see fp32 views (master_views()) that hold
// bytes only between gather_all() and release_all().
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/flat_layout.h"

namespace loom::parallel {

class FullyShardedParameters {
 public:
  struct Unit {
    int64_t block = -1;          // the block's layer; -1: the root unit
    std::vector<size_t> params;  // indices into the parameter list
    FlatLayout flat;             // params[j] at flat.offset(j), padded and cut into dp shards
    int64_t shard_begin = 0;     // this rank's shard: [shard_begin, shard_begin + flat.shard_size())
    torch::Tensor full;          // [padded]; the parameters are views of it; storage freed when released
    torch::Tensor wire;          // mixed precision: the shard rounded to the model's dtype, in flight
    torch::Tensor full_master;   // mixed precision: [padded] fp32, with bytes only between gather_all and release_all
    torch::Tensor shard;         // this rank's part of the parameters: what the optimizer updates
    torch::Tensor full_grad;     // [padded] while the unit's gradients arrive
    torch::Tensor shard_grad;    // this rank's part of the reduced gradients, summed over micro-batches
    torch::Tensor reduced;       // the reduce-scatter's output in flight
    CommHandle gather, reduce;
    // In flight until waited for (a group of one completes at launch, so the handles cannot tell).
    bool gathering = false, reducing = false;
    bool gathered = false;
    int64_t pending = 0;  // parameter gradients still to arrive in this backward
  };

  // An empty set: models built before the parameters are sharded call run()
  // through it, which only runs the block until shard() is called.
  FullyShardedParameters() = default;
  FullyShardedParameters(const FullyShardedParameters&) = delete;
  FullyShardedParameters& operator=(const FullyShardedParameters&) = delete;
  ~FullyShardedParameters();

  // PARAMS in order of use; BLOCK_OF[i]: the layer of the block holding
  // parameter i, or -1. Keeps this rank's shard and, if SHARD_PARAMETERS
  // (ZeRO-3), releases the rest.
  // AVERAGE_OVER divides the summed gradients (0: the group's size; MoE
  // experts are sharded over expert-dp but averaged over all of dp).
  // MODEL_DTYPE: the dtype the model computes with its parameters (bf16 or fp16: mixed precision).
  void shard(std::vector<torch::Tensor> params, const std::vector<int64_t>& block_of, Communicator& dp,
             bool shard_parameters = true, int64_t average_over = 0, torch::ScalarType model_dtype = torch::kFloat);
  bool mixed() const { return mixed_; }
  // Mixed precision: fp32 views of every parameter (for checkpoints), valid between gather_all() and release_all().
  const std::vector<torch::Tensor>& master_views() const { return master_views_; }
  // The whole gradient of parameter I while its unit's backward is in progress (the root's: the whole step).
  torch::Tensor gradient_of(size_t i) const;
  // INNER's blocks run inside this one's (MoE experts, sharded over their own group).
  void chain(FullyShardedParameters* inner) { inner_ = inner; }
  bool active() const { return dp_ != nullptr; }
  // Under a split backward (zb-h1) a block's weight gradients arrive in W passes after its
  // backward, with other micro-batches' backwards in between: every unit's gradient buffer
  // then lives for the whole step, as the root's does, and is reduce-scattered in finish().
  // Parameters are still released after each backward (W passes do not read them). The
  // price is ZeRO-2/3's gradient memory: whole buffers, as under ZeRO-1. Before shard().
  void hold_gradients_for_step() { hold_for_step_ = true; }
  bool shards_parameters() const { return shard_parameters_; }

  // Block LAYER's forward, FORWARD, with its parameters gathered.
  torch::Tensor run(int64_t layer, const std::function<torch::Tensor()>& forward);

  void start_step();  // gathers the root unit and zeroes the gradients
  void finish();      // reduces the root unit's gradients, waits for all, averages over dp
  // ZeRO-2: all-gathers the updated shards into the whole parameters (after the optimizer step).
  void gather_updated();
  // Every unit whole (collective), e.g. to save or load; release_all() drops
  // them again, after copying the (loaded) values into the shards if TAKE_VALUES.
  void gather_all();
  void release_all(bool take_values = false);

  const std::vector<Unit>& units() const { return units_; }
  std::vector<Unit>& units() { return units_; }
  // Where parameter I sits: its unit, and its place in the unit's flat layout.
  std::pair<size_t, size_t> where(size_t i) const { return where_[i]; }
  const std::vector<torch::Tensor>& params() const { return params_; }

  // This rank's pieces of the reduced gradients of the parameters KEEP accepts (by index).
  std::vector<torch::Tensor> shard_grad_pieces(const std::function<bool(size_t)>& keep) const;

  // For the backward gate and the gradient hooks.
  void before_backward(size_t unit);
  void gradient_arrived(size_t param);

 private:
  torch::Tensor run_unit(int64_t layer, const std::function<torch::Tensor()>& forward);
  void launch_gather(size_t unit);
  void wait_gathered(size_t unit);
  void release(size_t unit);
  void reduce(size_t unit);
  void finish_reduce(size_t unit);
  size_t unit_of_block(int64_t layer) const;

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> master_views_;  // mixed precision
  std::vector<std::pair<size_t, size_t>> where_;
  std::vector<Unit> units_;
  Communicator* dp_ = nullptr;
  bool shard_parameters_ = true;
  bool mixed_ = false;
  bool hold_for_step_ = false;
  int64_t average_over_ = 1;
  FullyShardedParameters* inner_ = nullptr;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

}  // namespace loom::parallel
