#include "launch/communicator_factory.h"

#include "core/errors.h"
#ifndef LOOM_WITHOUT_GLOO
#include "parallel/gloo_communicator.h"
#endif
#ifdef LOOM_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace loom::launch {

parallel::CommunicatorFactory communicator_factory(const parallel::LaunchEnv& env, const torch::Device& device,
                                                   const std::shared_ptr<parallel::CommStats>& stats,
                                                   std::chrono::milliseconds timeout) {
  parallel::CommunicatorFactory factory;
#ifdef LOOM_WITH_NCCL
  if (device.is_cuda()) factory = parallel::make_nccl_factory(env.store(), device.index(), stats, timeout);
#endif
#ifndef LOOM_WITHOUT_GLOO
  if (!device.is_cuda()) factory = parallel::make_gloo_factory(env.store(), env.single_host(), stats, timeout);
#else
  if (!device.is_cuda() && env.world() > 1) {
    throw InputError(
        "this loom was built without Gloo (LOOM_WITH_GLOO=OFF), so CPU ranks cannot talk; "
        "train on GPUs (train.device cuda) or as one process");
  }
#endif
  return factory;
}

}  // namespace loom::launch
