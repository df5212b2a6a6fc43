#include "core/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>

namespace loom {
namespace {
// Set once at start-up before any thread exists; read-only afterwards.
int g_log_rank = 0;
}  // namespace

void init_logging(int rank, int world) {
  g_log_rank = rank;
  auto logger = spdlog::stdout_logger_mt("loom-" + std::to_string(rank));
  logger->set_pattern(world > 1 ? "[loom rank " + std::to_string(rank) + "] %v" : "[loom] %v");
  const char* level = std::getenv("LOOM_LOG_LEVEL");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

bool is_log_rank() {
  return g_log_rank == 0;
}

}  // namespace loom
