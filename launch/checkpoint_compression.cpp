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
  // A fresh state counts the steps already done: PowerSGD keeps to the run's powersgd.start_step.
  const int64_t done = manifest.at("step").get<int64_t>();
  const std::string afresh =
      kind == GradCompression::powersgd
          ? fmt::format("error feedback and PowerSGD's Q start afresh (PowerSGD still from step {})",
                        std::max(done, config_.parallel.powersgd.start_step) + 1)
          : std::string("error feedback starts afresh");
  if (!bytes) {
    info0(
        "gradient compression state not restored (the checkpoint has grad_compression {} at layout {}; this run {}{}): "
        "{}",
        saved, manifest.at("layout").dump(), to_string(kind), same_layout ? "" : " at another layout", afresh);
    sync_->set_compression_reductions(done);
    return;
  }
  if (!sync_->set_compression_state(parallel::unpack_tensors(*bytes))) {
    info0(
        "gradient compression state not restored: the checkpoint's buckets, PowerSGD ranks or expert split differ "
        "from this run's (parallel.bucket_mb, parallel.powersgd.rank or parallel.expert_tp changed): {}",
        afresh);
    sync_->set_compression_reductions(done);
  }
}

}  // namespace loom::launch
