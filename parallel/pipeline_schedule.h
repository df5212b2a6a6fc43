// Pipeline schedules as data: one function lists, for one pipeline stage, the
// order of its forward and backward passes over micro-batches and model
// chunks; an executor runs the list and tests read it. Communication is
// implied: a forward receives from the previous virtual stage and sends to
// the next, a backward the other way round.
//
// Virtual stage k = chunk * P + stage (Megatron-LM's interleaving): with
// P = 2 stages and V = 2 chunks, stage 0 holds virtual stages 0 and 2.
//
//   gpipe        all forwards, then all backwards (V = 1)
//   1f1b         P - stage - 1 warm-up forwards, then one forward one
//                backward, then the remaining backwards (V = 1)
//   interleaved  1F1B over chunks in Megatron-LM's order; M divisible by P
//   zb-h1        zero bubble (Qi et al., ZB-H1): backward split into B, the
//                input's gradient, and W, the weights'; 1F1B's order of
//                forwards and B passes, with stage s holding back s W passes
//                (W of micro-batch j follows B of j + s) until the cool-down,
//                whose bubbles they fill. Every stage then keeps at most P
//                micro-batches' weight-gradient inputs, the first stage's
//                1F1B peak, and at most P - s full activations (V = 1)
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/config_enums.h"

namespace loom::parallel {

using loom::PipelineSchedule;  // parallel.schedule

struct PipelineAction {
  // backward: the whole backward; backward_input and backward_weight: its two halves
  // under a split-backward schedule (zb-h1), B and W.
  enum Kind { forward, backward, backward_input, backward_weight };
  Kind kind;
  int64_t micro;
  int64_t chunk;
  bool operator==(const PipelineAction& o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};

inline char letter_of(PipelineAction::Kind kind) {
  return kind == PipelineAction::forward ? 'F' : kind == PipelineAction::backward_weight ? 'W' : 'B';
}

// "F3.1": forward of micro-batch 3 through chunk 1 ("W3.1" its weight gradients).
inline std::ostream& operator<<(std::ostream& out, const PipelineAction& a) {
  return out << letter_of(a.kind) << a.micro << '.' << a.chunk;
}

// Whether SCHEDULE splits the backward into input (B) and weight (W) passes.
inline bool splits_backward(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::zb_h1;
}

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                             int64_t micro_batches, int64_t chunks);

// Under a split backward ZeRO-3 releases a block's parameters when the backward reaches the block
// below (parallel/fully_sharded.h): a stage's lowest block stays gathered after its B, and the next
// forward or B that finds it so gathers nothing. How many of STAGE's forwards and B passes directly
// follow a B (W passes between do not count).
int64_t passes_after_input_backward(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches);

// A point-to-point message of the pipeline: the activations of MICRO going
// into virtual stage INTO (from INTO - 1), or the gradient going into INTO
// (from INTO + 1). Both ends name a message alike, which is what lets the
// executor tag it and the tests pair every send with its receive.
struct PipelineTransfer {
  enum Direction { send, recv };
  Direction direction;
  bool gradient;
  int64_t micro;
  int64_t into;  // the receiving virtual stage
  int64_t peer;  // the other end's pipeline stage
};

// What action A of STAGE receives before it runs (first) and sends after it
// (a W pass neither receives nor sends).
std::vector<PipelineTransfer> pipeline_transfers(const PipelineAction& a, int64_t stage, int64_t stages,
                                                 int64_t chunks);

// Replays every stage's actions with unit costs (a chunk's forward takes 1/V,
// its backward 2/V, split into B and W of 1/V each) and the send/receive
// dependencies, communication free.
struct PipelineSimulation {
  double makespan = 0;
  double bubble = 0;                       // idle fraction of the makespan, averaged over stages
  double idle = 0;                         // idle time per stage, averaged, in forward times of the whole model
  std::vector<std::vector<double>> start;  // start[stage][i]: when action i of that stage began
  // Per stage, the most micro-batches (over chunks) whose forward has run and whose
  // input gradient has not: their whole activations are held.
  std::vector<int64_t> peak_in_flight;
  // ... and whose weight gradients have not: the inputs of their linear layers are held.
  std::vector<int64_t> peak_awaiting_weights;
};

PipelineSimulation simulate_pipeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks);

// The bubble by the formula, as a fraction of the step with balanced stages:
// (p-1)/(m v + p-1), or for a split backward with F = B = W, (p-1)/(3m + p-1).
double formula_bubble(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks);

// The simulated timeline as text, a row per stage and a column per forward of
// one chunk ("F3" forward of micro-batch 3, "B3" backward over two columns,
// "." idle; with chunks, lower case for odd chunks; "W3" the weight pass of a
// split backward), then the bubble and the peaks of micro-batches in flight.
std::string render_pipeline_timeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks);

}  // namespace loom::parallel
