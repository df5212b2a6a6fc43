// `loom verify`'s comparison (launch/verify.h): two runs of the same model from the same weights and
// data, the user's layout and a reference, each with its metrics.jsonl and its first step's dumps
// (launch/step_dump.h). Losses step by step; step 1's gradients and updated weights of every
// parameter by global name, whole (its tp parts joined) on every replica; and, where they differ,
// the parameters that differ most with the parallel dimensions each is split or replicated on, and
// the dimension to suspect. Pure file reading and arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::launch {

struct VerifyRuns {
  std::string layout_dir, reference_dir;  // run directories: metrics.jsonl and first_step/
  int64_t steps = 5;
  double rtol = 1e-5;        // relative: |a - b| / |b| for losses, max |a - b| / max |b| per tensor
  std::string tolerance_of;  // how the tolerance was chosen ("fp32"), for the verdict
  // The layout rounds by design (bf16 compute, or gradients sent in bf16): from step 2 on its
  // weights are the reference's within that rounding, so a mixture of experts' router may move any
  // number of choices, and the runs are compared up to that step as after a near-tie.
  bool rounds = false;
  // The updated weights are AdamW's: the first step moves each weight by lr c g / (c |g| + eps) (c:
  // the clipping factor), which turns a gradient's last-bit difference into up to lr where |g| is
  // near eps; that much of a weight's difference, worked out from both runs' gradients, is allowed.
  // False (Muon): the weights are not compared.
  bool adamw = true;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;  // 0: none
};

struct VerifyVerdict {
  bool equal = false;
  std::vector<std::string> report;  // lines before the verdict: what was compared, the worst differences
  std::string line;                 // "verdict: ..."
};

// Reads both runs and judges. Throws InputError naming the file when a dump or metrics.jsonl is missing.
VerifyVerdict compare_verify_runs(const VerifyRuns& runs);

// One parameter's place in a layout, as the verdict names it: "column-split over tp, stage 1,
// replicated over dp". SIZES: tp, cp, pp, dp, ep of the layout; STAGE: its pipeline stage.
struct ParameterPlace {
  std::string name;
  int64_t tp_split_dim = -1;
  bool expert = false;
  bool summed_over_tp = false;
  int64_t stage = 0;
  int64_t ep_rank = 0;
};
struct LayoutSizes {
  int64_t tp = 1, cp = 1, pp = 1, dp = 1, ep = 1;
};
std::string describe_place(const ParameterPlace& place, const LayoutSizes& sizes);

}  // namespace loom::launch
