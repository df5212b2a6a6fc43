// Bytes LibTorch allocates in CPU memory, counted by an allocator that wraps
// the default one, and their peak within a window of the program. The
// trainer reads the peak over a step's forward and backward to report the
// activation memory (what recomputation saves). LibTorch has one CPU
// allocator per process, so this is one per process too: install() puts it
// in place (idempotent); tensors allocated before are not counted.
#pragma once

#include <cstdint>

namespace loom {

class CpuMemory {
 public:
  static void install();
  static bool installed();
  // Counts allocations from here (outside a window the allocator only passes
  // them on, so training pays for the count only while it is wanted).
  static void begin_window();
  // The peak of the bytes allocated in the window and still held, above its
  // start; -1 when the allocator is not installed.
  static int64_t end_window();
};

}  // namespace loom
