#include "parallel/layer_ownership.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace loom::parallel {

double newton_schulz_cost(int64_t rows, int64_t cols, int64_t parts) {
  const double m = static_cast<double>(rows / parts), n = static_cast<double>(cols);
  return static_cast<double>(parts) * std::min(m, n) * std::min(m, n) * std::max(m, n);
}

std::vector<int64_t> balance_owners(const std::vector<double>& costs, int64_t ranks) {
  TORCH_CHECK(ranks >= 1, "balance_owners: ", ranks, " ranks");
  std::vector<size_t> order(costs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<size_t>(ranks), 0.0);
  std::vector<int64_t> owner(costs.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = least;
    load[static_cast<size_t>(least)] += costs[i];
  }
  return owner;
}

}  // namespace loom::parallel
