// Bytes LibTorch holds in CPU memory, counted by an allocator that wraps the
// default one: the current total and the peak since the last reset. The
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
  static int64_t current_bytes();
  static int64_t peak_bytes();
  // Starts a new peak from the current total.
  static void reset_peak();
};

}  // namespace loom
