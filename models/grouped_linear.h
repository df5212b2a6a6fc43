// The experts' matrix products as one grouped product per weight (Megatron-LM's GroupedMLP,
// torchtitan's grouped experts): the rows of X are sorted by expert, ROWS[g] of them for expert g,
// and each block of rows is multiplied by its own expert's weight in one call and one autograd
// node, where a loop over the experts makes G small products, G autograd nodes and G more in
// backward. The backward is two grouped products as well: the input's gradient by the same
// offsets, and every weight's gradient (its rows' output gradient^T times their input) by
// offsets along the rows.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "parallel/group_rows.h"

namespace loom::models {

// X [T, in], WEIGHTS: G tensors [out, in] (the experts' own, each gets its gradient), BIASES
// [G, out] or undefined, ROWS: G row counts summing to T (zeros allowed) -> [T, out], row t
// multiplied by the weight of the group it falls in. The weights are stacked inside, for the call
// only: backward keeps the weights themselves. ROWS are read on the host only where a product
// runs group by group (below); ATen's grouped GEMM takes them on the device.
torch::Tensor grouped_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                             const torch::Tensor& biases, const parallel::GroupRows& rows);

// The products of X with several kinds of weight at once (a SwiGLU's gate and up): KINDS[k] holds
// kind k's G weights [out, in], every kind of one shape -> [T, kinds x out], kind k's output in
// the columns from k x out. One grouped product with each group's weights of every kind one above
// another, where a product per kind runs G more small products on the CPU (on 32 experts of
// 128 x 256, gate and up fused took 51 ms where apart they took 59, forward and backward) and one
// launch more on a GPU.
torch::Tensor grouped_linear_kinds(const torch::Tensor& x, const std::vector<std::vector<torch::Tensor>>& kinds,
                                   const parallel::GroupRows& rows);

// The G weights [out, in] as one tensor [G, out, in]: a view where they lie in one storage one
// fixed distance apart (as pack_into_one_storage leaves them, or AdamW's flat buffer: one expert's
// parameters apart), else a stacked copy.
torch::Tensor stacked_weights(at::TensorList weights);

// Moves WEIGHTS (parameters of one shape, type and device) into one storage, one after another,
// their values unchanged, so that stacked_weights() views them where it copied them: on a GPU the
// copy in each product and again in its backward cost the MoE benchmark 9 ms of a 334 ms step.
// Only where no autograd graph has saved them yet: the storage they had is let go. Weights that do
// not each own their whole storage (views into another buffer) are left where they are.
void pack_into_one_storage(const std::vector<torch::Tensor>& weights);

// Y [T, out] plus each row's group's bias: BIASES [G, out] (undefined: Y as it is), ROWS as above.
torch::Tensor add_grouped_biases(torch::Tensor y, const torch::Tensor& biases, const parallel::GroupRows& rows);

// The same product as a loop of torch::linear over the groups: the reference for tests and bench.
torch::Tensor grouped_linear_loop(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                  const torch::Tensor& biases, const std::vector<int64_t>& rows);

}  // namespace loom::models
