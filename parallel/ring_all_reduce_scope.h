// A scope in which this thread's all-reduces take the ring at every size.
#pragma once

namespace loom::parallel {

// While one lives, this thread's all-reduces and all-gathers over Gloo take Gloo's ring at every
// size, not the one all-to-all that small ones take otherwise (parallel/gloo_communicator.cpp):
// the alpha-beta probe times the ring, the algorithm its model (and a cluster file's alpha and
// beta) describes. Other backends have one algorithm and ignore it.
class RingAllReduceScope {
 public:
  RingAllReduceScope();
  ~RingAllReduceScope();
  RingAllReduceScope(const RingAllReduceScope&) = delete;
  RingAllReduceScope& operator=(const RingAllReduceScope&) = delete;

  // Whether one lives on this thread.
  static bool active();

 private:
  bool previous_;
};

}  // namespace loom::parallel
