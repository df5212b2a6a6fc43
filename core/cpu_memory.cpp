#include "core/cpu_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <malloc.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

namespace loom {
namespace {

std::atomic<bool> g_installed{false};

// A DataPtr's deleter is a plain function, so the counts live at namespace
// scope; they are only ever touched through CountingAllocator.
struct Counts {
  std::mutex mutex;
  std::unordered_map<void*, int64_t> sizes;
  int64_t current = 0;  // bytes allocated in windows and not yet freed
  int64_t peak = 0;
  int64_t window_start = 0;
  std::atomic<bool> counting{false};
  c10::DeleterFnPtr base_deleter = nullptr;
};
Counts& counts() {
  static Counts* c = new Counts();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

void counted_delete(void* ptr) {
  auto& c = counts();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.sizes.find(ptr);
    if (it != c.sizes.end()) {
      c.current -= it->second;
      c.sizes.erase(it);
    }
  }
  c.base_deleter(ptr);
}

class CountingAllocator : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    auto& c = counts();
    if (!c.counting.load(std::memory_order_relaxed)) return inner;  // freed by the base deleter, uncounted
    void* ptr = inner.release_context();  // the default allocator's context is the data itself
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      c.sizes[ptr] = static_cast<int64_t>(n);
      c.current += static_cast<int64_t>(n);
      c.peak = std::max(c.peak, c.current);
    }
    return {ptr, ptr, &counted_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

 private:
  c10::Allocator* base_;
};

}  // namespace

void CpuMemory::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* base = c10::GetDefaultCPUAllocator();
    if (!base->raw_deleter()) return;  // an allocator whose context is not its data: leave it alone
    counts().base_deleter = base->raw_deleter();
    static CountingAllocator allocator(base);
    c10::SetAllocator(c10::DeviceType::CPU, &allocator, /*priority=*/1);
    g_installed = true;
  });
}

bool CpuMemory::installed() {
  return g_installed;
}

void CpuMemory::begin_window() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.window_start = c.peak = c.current;
  c.counting = true;
}

int64_t CpuMemory::end_window() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.counting = false;
  return g_installed ? c.peak - c.window_start : -1;
}

void CpuMemory::keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest; bigger blocks are still mapped
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // keep up to 1 GiB of free heap top
  mallopt(M_TOP_PAD, 256 << 20);        // grow the heap in large steps
}

}  // namespace loom
