// A training step's losses and every pipeline stage's timing, shared with every rank: the last
// stage's losses (the model's, and multi-token prediction's where the model has it) averaged over
// dp and cp, each stage's busy and wall time from the pipeline group.
#pragma once

#include <vector>

#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"

namespace loom::launch {

struct StepResult {
  double loss = 0.0;                                 // mean over the global batch
  double mtp_loss = -1.0;                            // multi-token prediction's (model.mtp); -1: none
  std::vector<parallel::PipelineStepTiming> stages;  // per pipeline stage
};

// Collective over the pipeline group, then dp x cp. LOSSES: this rank's mean losses over its
// micro-batches (meaningful on the last stage; the same count on every rank: the loss, then MTP's
// if the model has it); TIMING: this rank's stage's.
StepResult share_step_losses(parallel::ProcessGroups& groups, const std::vector<double>& losses,
                             const parallel::PipelineStepTiming& timing);

}  // namespace loom::launch
