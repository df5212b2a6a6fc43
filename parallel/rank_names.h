// Ranks named in an error message: "rank 2" or "ranks 1, 3", at most 16 and then a count.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace loom::parallel {

inline std::string name_ranks(const std::vector<int64_t>& ranks) {
  constexpr size_t kNamed = 16;
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size() && i < kNamed; ++i) s << (i ? ", " : "") << ranks[i];
  if (ranks.size() > kNamed) s << " and " << ranks.size() - kNamed << " more";
  return s.str();
}

}  // namespace loom::parallel
