// Saving and resuming a training job, at any layout. Every rank writes the
// slices of the parameters and optimizer moments it owns (tp shards; tp- and
// dp-replicated tensors once, by tp rank 0 of dp rank 0; tied copies never)
// and its RNG streams; rank 0 writes the manifest and publishes the
// checkpoint (core/checkpoint_store.h). Loading reads, for each local tensor,
// exactly the global slice this rank's layout needs, whatever layout wrote it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "optim/optimizer.h"
#include "parallel/parallel_parameter.h"
#include "parallel/process_groups.h"
#include "parallel/tp_rng.h"

namespace loom::launch {

struct TrainingState {
  int64_t step = 0;
  int64_t consumed_samples = 0;
  // fp16's dynamic loss scale: its value (0: not fp16), clean steps since it last changed, skipped steps.
  double loss_scale = 0.0;
  int64_t loss_scale_clean_steps = 0;
  int64_t skipped_steps = 0;
};

class Checkpointer {
 public:
  Checkpointer(const Config& config, parallel::ProcessGroups& groups,
               const std::vector<parallel::ParallelParameter>& params, optim::Optimizer& optimizer,
               parallel::TensorParallelRng& rng);

  // Collective. Saves the state after STATE.step into checkpoint.dir; returns the checkpoint's path.
  // MIDWAY, when given, runs after this rank's files are written and before the checkpoint is published (tests kill the
  // job there).
  std::string save(const TrainingState& state, const std::function<void()>& midway = {});

  // Collective. RESUME is "auto" (the newest complete checkpoint in
  // checkpoint.dir, falling back past broken ones; nullopt when there is
  // none) or a checkpoint's path (refused with exit 2 when broken).
  std::optional<TrainingState> load(const std::string& resume);

 private:
  const Config& config_;
  parallel::ProcessGroups& groups_;
  std::vector<parallel::ParallelParameter> params_;
  optim::Optimizer& optimizer_;
  parallel::TensorParallelRng& rng_;
};

// Reads into each parameter its slice of the whole tensor READ(name, dim,
// offset, length) returns (dim -1: whole). Throws InputError naming SOURCE
// when a tensor is missing or has another shape.
using GlobalSliceReader =
    std::function<std::optional<torch::Tensor>(const std::string& name, int64_t dim, int64_t offset, int64_t length)>;
void load_parameter_slices(const std::vector<parallel::ParallelParameter>& params,
                           const std::vector<torch::Tensor>& into, int64_t tp_rank, int64_t tp_size,
                           const GlobalSliceReader& read, const std::string& source);

// model.init_from: this rank's slices of a Hugging Face model directory (its
// architecture already in CONFIG, core/hf_config.h) or a GPT-2 safetensors file.
void init_from_pretrained(const Config& config, const std::vector<parallel::ParallelParameter>& params, int64_t tp_rank,
                          int64_t tp_size);

}  // namespace loom::launch
