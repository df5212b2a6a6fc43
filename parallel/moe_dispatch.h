// Token dispatch for expert parallelism: the experts of an MoE layer are
// spread over the ep group (rank r holds experts [r E/P, (r + 1) E/P)), and
// every token travels to the ranks of its chosen experts and back by
// all-to-all with uneven splits.
//
//   dispatch: sort the (token, choice) pairs by expert, exchange the counts,
//             all-to-all the rows, regroup the rows received from each rank
//             so that each local expert's tokens are contiguous
//   combine:  the inverse: ungroup, all-to-all back, weight each row by its
//             router weight and add it to its token
//
// Both are built from differentiable pieces (index_select, the all-to-all
// autograd function below, index_add), so backward is the mirror image:
// gradients travel back over the same splits, swapped.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/group_rows.h"

namespace loom::parallel {

// Bytes an all-to-all user put on the wire and took off it (rows to and from
// other ranks; its own rows stay), forward and backward.
struct AllToAllVolume {
  int64_t sent = 0;
  int64_t received = 0;
};

// Rows of X go to rank r of COMM by INPUT_SPLITS[r]; the result holds
// OUTPUT_SPLITS[r] rows from each rank r, in rank order. Backward sends the
// gradient back over the swapped splits. VOLUME (may be null) accumulates the
// bytes of both directions; it must outlive the backward pass.
torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& output_splits,
                              const std::vector<int64_t>& input_splits, Communicator& comm,
                              AllToAllVolume* volume = nullptr);

// Which experts each token goes to, as the router decided.
struct ExpertAssignment {
  torch::Tensor experts;  // [T, k] int64: global expert index of each choice
  torch::Tensor weights;  // [T, k]: the weight of each choice in the token's output
  torch::Tensor keep;     // [T, k] bool: false for a choice dropped over capacity
  bool all_kept = false;  // true: KEEP is all true (no capacity), and dispatch need not read it
};

// EXPERTS (int64, any shape) -> [NUM_EXPERTS] int64: how many times each expert appears. Unlike
// torch::bincount, which reads the largest value back to the host on a GPU, this never waits.
torch::Tensor count_per_expert(const torch::Tensor& experts, int64_t num_experts);

class TokenDispatcher {
 public:
  // NUM_EXPERTS must be a multiple of EP's size.
  TokenDispatcher(int64_t num_experts, Communicator& ep, AllToAllVolume* volume = nullptr);

  int64_t num_local_experts() const { return num_local_; }
  int64_t first_local_expert() const { return num_local_ * ep_.rank(); }

  // What combine() needs to send each row home.
  struct Plan {
    torch::Tensor token_of_row;   // [N] the token each of this rank's kept choices came from, in expert order
    torch::Tensor weight_of_row;  // [N] its router weight (differentiable)
    torch::Tensor regroup;        // received rows -> grouped by local expert
    torch::Tensor ungroup;        // the inverse permutation
    std::vector<int64_t> input_splits, output_splits;
    int64_t num_tokens = 0;
    // One ep rank and every choice kept: the row of each choice (token-major), and each token's
    // weights [T, k]. Combine then gathers each token's k rows and sums them by their weights,
    // and backward gathers too: no scatter-add either way.
    torch::Tensor row_of_choice, choice_of_row, weights;
  };
  struct Dispatched {
    torch::Tensor tokens;         // [M, H]: rows for this rank's experts, grouped by local expert
    GroupRows tokens_per_expert;  // M split by local expert, in order
    Plan plan;
  };

  // X [T, H]: this rank's tokens.
  Dispatched dispatch(const torch::Tensor& x, const ExpertAssignment& assignment);
  // EXPERT_OUTPUT [M, H'] in dispatch's row order -> [T, H']: each token's
  // weighted sum over its kept choices (zero for a token whose every choice was dropped).
  torch::Tensor combine(const torch::Tensor& expert_output, const Plan& plan);

 private:
  Dispatched dispatch_all_kept(const torch::Tensor& x, const ExpertAssignment& assignment);

  int64_t num_experts_, num_local_;
  Communicator& ep_;
  AllToAllVolume* volume_;
};

}  // namespace loom::parallel
