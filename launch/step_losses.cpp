#include "launch/step_losses.h"

namespace loom::launch {

StepResult share_step_losses(parallel::ProcessGroups& groups, const std::vector<double>& losses,
                             const parallel::PipelineStepTiming& timing) {
  // Every stage's timing and the last stage's losses reach every rank of the pipeline in one call.
  std::vector<double> values{timing.busy_s, timing.wall_s};
  values.insert(values.end(), losses.begin(), losses.end());
  auto mine = torch::tensor(values, torch::kFloat64);
  auto all = torch::empty({groups.pp().size(), mine.size(0)}, torch::kFloat64);
  groups.pp().all_gather(all, mine).wait();
  StepResult result;
  for (int64_t stage = 0; stage < all.size(0); ++stage) {
    result.stages.push_back({all[stage][0].item<double>(), all[stage][1].item<double>()});
  }
  // Each rank's loss is the mean over its tokens: over dp and cp (equal token counts) the global batch's mean.
  auto last = all[all.size(0) - 1].narrow(0, 2, static_cast<int64_t>(losses.size())).clone();
  groups.dp_cp().all_reduce(last).wait();
  last /= static_cast<double>(groups.dp_cp().size());
  result.loss = last[0].item<double>();
  if (losses.size() > 1) result.mtp_loss = last[1].item<double>();
  return result;
}

}  // namespace loom::launch
