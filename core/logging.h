// Logging through spdlog. Every rank logs warnings and errors with its rank in
// the prefix; progress lines go through `info0`, which prints on rank 0 only.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace loom {

// Sets the pattern "[loom rank R] message" and the level (LOOM_LOG_LEVEL or info).
void init_logging(int rank, int world);

bool is_log_rank();

template <typename... Args>
void info0(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  if (is_log_rank()) spdlog::info(fmt, std::forward<Args>(args)...);
}

// A warning every rank would give alike, given once.
template <typename... Args>
void warn0(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  if (is_log_rank()) spdlog::warn(fmt, std::forward<Args>(args)...);
}

}  // namespace loom
