// `loom prepare`'s progress on stderr: documents, documents/s, percent of input
// bytes and ETA. On a terminal it redraws one line at most twice a second; in a log
// it writes a line every 30 s, so that logs stay short. The final line is always written.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>

namespace loom::launch {

class ProgressBar {
 public:
  ProgressBar(std::ostream& out, bool terminal, int64_t total_bytes);
  void update(int64_t documents, int64_t bytes);
  void finish(int64_t documents, int64_t bytes);

 private:
  void draw(int64_t documents, int64_t bytes, bool last);

  std::ostream& out_;
  bool terminal_;
  int64_t total_bytes_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace loom::launch
