// Runs one rank's share of a pipeline schedule for one optimizer step: the
// forwards and backwards of pipeline_actions() in order, with activations
// going to the next virtual stage and gradients to the previous one by
// point-to-point messages over the pp group.
//
// Why it cannot deadlock: sends never wait for the receiver, every message
// carries a tag naming its micro-batch, virtual stage and direction (so a
// receive can only match its own message), and every receive waits for a
// forward or backward that comes earlier in the schedule's dependency order,
// which simulate_pipeline() checks is acyclic. The receive an action needs is
// posted one action ahead so that its transfer overlaps the current compute.
//
// Memory: a micro-batch's activations live from its forward to its backward
// on this virtual stage, then are freed; with 1F1B that bounds them to
// pp - stage micro-batches per stage.
//
// Split backward (zb-h1): B runs autograd with the linear layers' weight
// gradients deferred (parallel/weight_grad_store.h) and frees the activations
// as a whole backward does; the inputs and output gradients of the linear
// layers wait in the store until the schedule's W pass of that micro-batch
// hands their products to autograd. Every W runs before run() returns, so
// what ends a step (gradient reduction, clipping, the optimizer) sees every
// gradient; data-parallel buckets launch as the W pass that completes them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/weight_grad_store.h"

namespace loom::parallel {

struct PipelineStepTiming {
  double busy_s = 0.0;                // forward and backward compute
  double wall_s = 0.0;                // the whole step's pipeline, waits included
  int64_t deferred_weight_grads = 0;  // weight-gradient products run in W passes (split backward)
};

class PipelineExecutor {
 public:
  // Runs the forward of virtual-stage chunk CHUNK (0 .. chunks - 1 on this
  // rank) on micro-batch MICRO. INPUT is undefined on the first virtual stage
  // and the received activations elsewhere. The last virtual stage returns the
  // scalar to backpropagate (the loss, already scaled); the others return
  // activations of the ACTIVATION_SHAPE given to the constructor.
  using ChunkForward = std::function<torch::Tensor(int64_t chunk, int64_t micro, const torch::Tensor& input)>;

  // PP is the pipeline group, in stage order.
  PipelineExecutor(PipelineSchedule schedule, int64_t micro_batches, int64_t chunks, Communicator& pp,
                   std::vector<int64_t> activation_shape, torch::ScalarType activation_dtype = torch::kFloat32,
                   torch::Device device = torch::kCPU);

  PipelineStepTiming run(const ChunkForward& forward);
  // The forwards of the schedule alone, in its order, for evaluation (under torch::NoGradGuard): the
  // last virtual stage's outputs are not backpropagated. Forwards depend only on earlier forwards, so
  // the order that cannot deadlock with the backwards cannot without them either.
  void run_forward(const ChunkForward& forward);

  const std::vector<PipelineAction>& actions() const { return actions_; }

 private:
  struct Message {
    torch::Tensor tensor;
    CommHandle handle;
  };
  int tag(const PipelineTransfer& t) const;

  Communicator& pp_;
  int64_t stages_, stage_, chunks_;
  std::vector<int64_t> activation_shape_;
  torch::ScalarType activation_dtype_;
  torch::Device device_;  // where received activations and gradients land
  bool split_backward_;
  std::vector<PipelineAction> actions_;
  WeightGradStore weight_grads_;
};

}  // namespace loom::parallel
