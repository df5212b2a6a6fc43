#include "parallel/ring_all_reduce_scope.h"

namespace loom::parallel {
namespace {

// Per thread, so that a probe on one thread leaves another's collectives (HSDP's replica steps,
// a composite's later steps) as they are.
thread_local bool t_ring_only = false;

}  // namespace

RingAllReduceScope::RingAllReduceScope() : previous_(t_ring_only) {
  t_ring_only = true;
}

RingAllReduceScope::~RingAllReduceScope() {
  t_ring_only = previous_;
}

bool RingAllReduceScope::active() {
  return t_ring_only;
}

}  // namespace loom::parallel
