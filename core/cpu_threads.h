// The rank's threads (LibTorch's intra-op pool, which is also MKL's) lent to
// loom's own pieces of work.
//
// Pieces are cut at fixed places, whatever the thread count: each element is
// computed by the same code path on 1 thread or 16, so a layout that gives a
// rank fewer threads gets the same bits.
#pragma once

#include <cstdint>
#include <functional>

namespace loom {

// Runs FN(begin, end) over [0, N) in contiguous ranges on the pool's threads (at::parallel_for;
// inline when the pool has one thread or the caller is already in a parallel region). Ops inside
// FN run single-threaded there. FN runs without autograd (the callers are autograd functions'
// bodies). An exception thrown by any piece reaches the caller.
void parallel_over_threads(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

// FN(begin, end) over [0, N) in blocks of BLOCK (the last may be shorter), the blocks dealt to the
// pool's threads: cut at the same places whatever the thread count (row-wise kernels whose rows,
// or whose per-block partial sums, must not depend on it).
void parallel_over_blocks(int64_t n, int64_t block, const std::function<void(int64_t begin, int64_t end)>& fn);

// An elementwise op's FN(begin, length) over [0, NUMEL) in pieces that start at multiples of
// 64 elements, where LibTorch's vectorised loop would start anyway; the op inside runs
// single-threaded on its piece. LibTorch's own threading cuts a tensor into one piece per
// thread wherever that falls, and the piece's scalar tail then computes a few elements another
// way: the last bit would depend on the thread count.
void parallel_over_elements(int64_t numel, const std::function<void(int64_t begin, int64_t length)>& fn);

}  // namespace loom
