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
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/config_enums.h"

namespace loom::parallel {

using loom::PipelineSchedule;  // parallel.schedule

struct PipelineAction {
  enum Kind { forward, backward };
  Kind kind;
  int64_t micro;
  int64_t chunk;
  bool operator==(const PipelineAction& o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};

// "F3.1": forward of micro-batch 3 through chunk 1.
inline std::ostream& operator<<(std::ostream& out, const PipelineAction& a) {
  return out << (a.kind == PipelineAction::forward ? 'F' : 'B') << a.micro << '.' << a.chunk;
}

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                             int64_t micro_batches, int64_t chunks);

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

// What action A of STAGE receives before it runs (first) and sends after it.
std::vector<PipelineTransfer> pipeline_transfers(const PipelineAction& a, int64_t stage, int64_t stages,
                                                 int64_t chunks);

// Replays every stage's actions with unit costs (a chunk's forward takes 1/V,
// its backward 2/V) and the send/receive dependencies, communication free.
struct PipelineSimulation {
  double makespan = 0;
  double bubble = 0;                       // idle fraction of the makespan, averaged over stages
  std::vector<std::vector<double>> start;  // start[stage][i]: when action i of that stage began
};

PipelineSimulation simulate_pipeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks);

// The simulated timeline as text, a row per stage and a column per forward of
// one chunk ("F3" forward of micro-batch 3, "B3" backward over two columns,
// "." idle; with chunks, lower case for odd chunks), then the bubble.
std::string render_pipeline_timeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks);

}  // namespace loom::parallel
