// The per-rank state of parallel.grad_compression in a checkpoint (error buffers, PowerSGD's Q):
// restored only into the layout that saved it, with the same compression, since each rank's
// buffers belong to its place in the layout.
#include "core/checkpoint_store.h"
#include "core/logging.h"
#include "launch/checkpoint.h"
#include "parallel/grad_compression.h"

namespace loom::launch {

void Checkpointer::restore_compression_state(const std::string& path, const nlohmann::json& manifest,
                                             bool same_layout) {
  const auto kind = config_.parallel.grad_compression;
  if (!sync_ || kind == GradCompression::none) return;
  const std::string saved = manifest.value("grad_compression", std::string("none"));
  std::optional<torch::Tensor> bytes;
  if (same_layout && saved == to_string(kind)) {
    bytes = read_checkpoint_bytes(path, manifest, "grad_compression/rank_" + std::to_string(groups_.rank()));
  }
  if (!bytes) {
    info0(
        "gradient compression state not restored (the checkpoint has grad_compression {} at layout {}; this run "
        "{}{}): error feedback and PowerSGD's Q start afresh",
        saved, manifest.at("layout").dump(), to_string(kind), same_layout ? "" : " at another layout");
    return;
  }
  if (!sync_->set_compression_state(parallel::unpack_tensors(*bytes))) {
    info0(
        "gradient compression state not restored: the checkpoint's buckets or PowerSGD ranks differ from this "
        "run's (parallel.bucket_mb or parallel.powersgd.rank changed): error feedback and PowerSGD's Q start afresh");
  }
}

}  // namespace loom::launch
