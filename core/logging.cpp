#include "core/logging.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loom {
namespace {
// Set once at start-up before any thread exists; read-only afterwards.
struct LogSettings {
  int rank = 0;
  LogLevel level = LogLevel::info;
  std::string prefix = "[loom] ";
  FILE* stream = stdout;
};
LogSettings g_settings;
// Lines from the background checkpoint writer and the main thread are written one at a time.
std::mutex g_write_mutex;

LogLevel level_from_env() {
  const char* value = std::getenv("LOOM_LOG_LEVEL");
  if (value == nullptr) return LogLevel::info;
  for (auto [name, level] : {std::pair{"debug", LogLevel::debug},
                             {"trace", LogLevel::debug},
                             {"info", LogLevel::info},
                             {"warn", LogLevel::warn},
                             {"warning", LogLevel::warn},
                             {"error", LogLevel::error},
                             {"critical", LogLevel::error},
                             {"off", LogLevel::off}}) {
    if (std::strcmp(value, name) == 0) return level;
  }
  return LogLevel::info;
}
}  // namespace

void init_logging(int rank, int world, bool to_stderr) {
  g_settings.rank = rank;
  g_settings.level = level_from_env();
  g_settings.prefix = world > 1 ? "[loom rank " + std::to_string(rank) + "] " : "[loom] ";
  g_settings.stream = to_stderr ? stderr : stdout;
}

bool is_log_rank() {
  return g_settings.rank == 0;
}

bool log_enabled(LogLevel level) {
  return level >= g_settings.level && level != LogLevel::off;
}

void log_line(LogLevel level, std::string_view message) {
  std::string line = g_settings.prefix;
  line.append(message);
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(g_write_mutex);
  std::fwrite(line.data(), 1, line.size(), g_settings.stream);
  std::fflush(g_settings.stream);
}

}  // namespace loom
