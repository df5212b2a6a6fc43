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

  // Keeps freed memory in the process (glibc: no mmap below 32 MiB, no trimming
  // of the heap's top). A training step frees and re-allocates the same
  // activations every time; handing them back to the kernel and faulting them
  // in again cost a third of the step on the benchmark GPT (bench/README.md).
  static void keep_freed_memory();
};

}  // namespace loom
