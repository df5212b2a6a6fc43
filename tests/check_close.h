// The tensor comparison the multi-rank Catch2 tests share. Include after <catch2/catch.hpp>.
#pragma once

#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>

namespace loom::test {

// |actual - expected| <= TOLERANCE * max(1, |expected|) elementwise: absolute for values of
// order one, relative for the sums of several ranks' contributions.
inline void check_close(const torch::Tensor& actual, const torch::Tensor& expected, const std::string& what,
                        double tolerance = 1e-6) {
  INFO(what);
  REQUIRE(actual.sizes() == expected.sizes());
  const double diff = ((actual - expected).abs() / expected.abs().clamp_min(1.0)).max().item<double>();
  INFO("max scaled |difference| = " << diff);
  CHECK(diff <= tolerance);
}

}  // namespace loom::test
