// The BLAS library's threads, lent to independent pieces of work.
//
// loom gives a rank's cores to OpenBLAS and runs LibTorch's own ops on one
// thread (README, "Threads"). That suits the large matrix products; work made
// of many small independent products (attention, head by head) goes faster
// with one core per piece, each piece calling BLAS single-threaded.
#pragma once

#include <cstdint>
#include <functional>

namespace loom {

// The threads BLAS would use for one product: OpenBLAS's setting, or 1 for a BLAS
// that does not say (the PyPI wheel's MKL, whose threads are LibTorch's own: loom's
// pieces then run in one piece while each product uses at::get_num_threads()).
int blas_threads();

// Runs FN(begin, end) over [0, N) cut into one contiguous range per BLAS
// thread: the calling thread takes the first, the others run on threads of
// their own, with BLAS set to one thread meanwhile and put back after. FN runs
// without autograd (the callers are autograd functions' bodies). An exception
// thrown by any piece is rethrown here once all have finished.
void parallel_over_blas_threads(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

// An elementwise op's FN(begin, length) over [0, NUMEL): in one piece when it is small
// (a thread would cost more than it saves), else one piece per BLAS thread, each starting
// at a multiple of 64 elements, where LibTorch's vectorised loop would be anyway, so the
// result does not depend on the number of threads.
void parallel_over_elements(int64_t numel, const std::function<void(int64_t begin, int64_t length)>& fn);

}  // namespace loom
