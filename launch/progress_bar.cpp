#include "launch/progress_bar.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace loom::launch {

namespace {

std::string duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return text;
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& out, bool terminal, int64_t total_bytes)
    : out_(out),
      terminal_(terminal),
      total_bytes_(total_bytes),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressBar::update(int64_t documents, int64_t bytes) {
  const auto now = std::chrono::steady_clock::now();
  const auto every = terminal_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(30000);
  if (now - last_draw_ < every) return;
  last_draw_ = now;
  draw(documents, bytes, false);
}

void ProgressBar::finish(int64_t documents, int64_t bytes) {
  draw(documents, bytes, true);
}

void ProgressBar::draw(int64_t documents, int64_t bytes, bool last) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // (Clamped: a file growing while it is read must not draw more than the whole bar.)
  const double fraction =
      total_bytes_ > 0 ? std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total_bytes_)) : 1.0;
  const int width = 30;
  const int filled = static_cast<int>(fraction * width);
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  char line[256];
  std::snprintf(line, sizeof(line), "prepare %s %3.0f%% %lld documents, %.0f documents/s, %s %s", bar.c_str(),
                100.0 * fraction, static_cast<long long>(documents), elapsed > 0 ? documents / elapsed : 0.0,
                last ? "elapsed" : "ETA",
                duration(last ? elapsed : (fraction > 0 ? elapsed / fraction - elapsed : 0)).c_str());
  out_ << (terminal_ ? "\r" : "") << line << (terminal_ && !last ? "" : "\n") << std::flush;
}

}  // namespace loom::launch
