// Rank-aware logging on fmt (the copy inside LibTorch's headers, used header-only). Every
// rank logs warnings and errors with its rank in the prefix; progress lines go through
// `info0`, which prints on rank 0 only. Each line is written whole and flushed at once, so
// lines of ranks that share a terminal or a log file never interleave mid-line.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace loom {

enum class LogLevel { debug, info, warn, error, off };

// Sets the prefix "[loom rank R] " (or "[loom] " in one process), the level (LOOM_LOG_LEVEL:
// debug, info, warn, error or off; info if unset) and where lines go (stdout, or stderr
// when `to_stderr`, as `loom generate` needs: its stdout carries the text alone).
void init_logging(int rank, int world, bool to_stderr = false);

bool is_log_rank();

// Writes one line at `level` if the level is enabled.
void log_line(LogLevel level, std::string_view message);

bool log_enabled(LogLevel level);

namespace log {

template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::info)) log_line(LogLevel::info, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::warn)) log_line(LogLevel::warn, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::error)) log_line(LogLevel::error, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace log

template <typename... Args>
void info0(fmt::format_string<Args...> format, Args&&... args) {
  if (is_log_rank()) log::info(format, std::forward<Args>(args)...);
}

// A warning every rank would give alike, given once.
template <typename... Args>
void warn0(fmt::format_string<Args...> format, Args&&... args) {
  if (is_log_rank()) log::warn(format, std::forward<Args>(args)...);
}

}  // namespace loom
