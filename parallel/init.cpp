#include "parallel/init.h"

#include <ATen/CPUGeneratorImpl.h>

namespace loom::parallel {

uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  uint64_t z = h ^ (seed + 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

torch::Tensor init_normal(uint64_t seed, const std::string& name, torch::IntArrayRef shape, double std) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(parameter_seed(seed, name));
  return torch::empty(shape, torch::kFloat32).normal_(0.0, std, generator);
}

}  // namespace loom::parallel
