// Layout-independent initialisation: a parameter's values depend only on the
// seed and its global name, never on which rank makes it or how the model is
// split. A layer always draws the full tensor and then keeps its slice.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace loom::parallel {

// The generator seed of the parameter called NAME (splitmix64 over FNV-1a).
uint64_t parameter_seed(uint64_t seed, const std::string& name);

// Full tensor of SHAPE drawn from N(0, STD^2) by the generator of (SEED, NAME).
torch::Tensor init_normal(uint64_t seed, const std::string& name, torch::IntArrayRef shape, double std);

}  // namespace loom::parallel
