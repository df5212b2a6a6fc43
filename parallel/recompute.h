// Activation recomputation: run a piece of the forward without keeping its
// intermediate activations, and run it again during backward to get them
// back. The random streams (the default generator, which draws replicated
// dropout masks, and the tp-split one) are put back to where they were for
// the re-run, so the masks and therefore the gradients are exactly those of
// a run that kept everything.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <functional>

namespace loom::parallel {

// FN of up to three tensors (unused ones are given as empty tensors). FN and SPLIT_GENERATOR
// (may be null) must outlive the backward pass.
using RecomputedFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
torch::Tensor recompute_in_backward(const RecomputedFn& fn, at::Generator* split_generator, const torch::Tensor& a,
                                    const torch::Tensor& b = {}, const torch::Tensor& c = {});

}  // namespace loom::parallel
