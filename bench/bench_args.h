// The benchmark programs' command line: "--name VALUE" pairs.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom::bench {

// The integer after NAME on the command line, or FALLBACK where NAME is not given.
inline int64_t int_arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

}  // namespace loom::bench
