// Saving and resuming a training job, at any layout. Every rank writes the
// slices of the parameters and optimizer moments it owns (tp shards; tp- and
// dp-replicated tensors once, by tp rank 0 of dp rank 0; tied copies never)
// and its RNG streams and gradient compression state; rank 0 writes the manifest and publishes the
// checkpoint (core/checkpoint_store.h). Loading reads, for each local tensor,
// exactly the global slice this rank's layout needs, whatever layout wrote it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "launch/parameter_slices.h"
#include "launch/training_state.h"
#include "optim/optimizer.h"
#include "parallel/gradient_sync.h"
#include "parallel/parallel_parameter.h"
#include "parallel/process_groups.h"
#include "parallel/rank_work.h"
#include "parallel/tp_rng.h"

namespace loom::launch {

struct PendingSave;  // a save whose files are being written (checkpoint.cpp)

class Checkpointer {
 public:
  // RUN_DIR is recorded in every manifest: a resume without --run-dir continues that directory.
  Checkpointer(const Config& config, parallel::ProcessGroups& groups,
               const std::vector<parallel::ParallelParameter>& params, optim::Optimizer& optimizer,
               parallel::TensorParallelRng& rng, std::string run_dir = "", parallel::GradientSync* sync = nullptr);

  ~Checkpointer();

  // Collective. Saves the state after STATE.step into checkpoint.dir; returns the checkpoint's path.
  // MIDWAY, when given, runs after this rank's files are written and before the checkpoint is published (tests kill the
  // job there). With checkpoint.async the state is copied to host memory here and written by a background
  // thread while training goes on; it is published once every rank has written its part (on_world_status), and
  // a save waits for the previous one first.
  std::string save(const TrainingState& state, const std::function<void()>& midway = {});

  // checkpoint.async: this rank's part of the save in flight: 0 none or written, 1 still writing, 2 failed.
  int pending_status() const;
  // Given the largest pending_status() over the world (every rank calls it alike): publishes the save in flight
  // when every rank has written its part; throws, stopping the job, when any rank failed to.
  void on_world_status(int largest);
  // checkpoint.async: whether a save is in flight, to be published by on_world_status (alike on every
  // rank: saves are collective).
  bool save_in_flight() const { return pending_ != nullptr; }
  // Collective: waits for the save in flight and publishes it (at the end of a run, or before the next save).
  void finish_pending();

  // Collective. RESUME is "auto" (the checkpoint `latest` names in
  // checkpoint.dir, else the newest, falling back past broken ones, which are
  // set aside; nullopt when there is none) or a checkpoint's path (refused
  // with exit 2 when broken). Checkpoints of checkpoint.dir newer than the one
  // loaded belong to an abandoned run (a rollback) and are set aside.
  // Data that would not continue the checkpoint's order (launch/data_record.h) is refused unless
  // ALLOW_DATA_CHANGE.
  // WHILE_CHECKING, when given, runs on rank 0 as it starts checking (a test's slow disk).
  std::optional<TrainingState> load(const std::string& resume, bool allow_data_change = false,
                                    const std::function<void()>& while_checking = {});

  // A step trained from the present state had a finite loss: the checkpoint it
  // was saved as or loaded from is verified (core/checkpoint_directory.h). Rank 0.
  void confirm_state();
  // Collective, for a diverged run: the checkpoint of the state that could not
  // train is set aside unless verified, and `latest` points at the newest one
  // left. Returns what a user should resume from, for the error message.
  std::string set_aside_diverged();

 private:
  // Collective: this rank's part of the state after STATE.step copied to host memory, the directory made.
  std::shared_ptr<PendingSave> snapshot(const TrainingState& state, const std::function<void()>& midway);
  // Collective, once every rank's files are written: rank 0's manifest, rename, `latest` and
  // retention, while the others wait (parallel/rank_work.h).
  void publish(const std::shared_ptr<PendingSave>& save);
  // parallel.grad_compression's state from checkpoint PATH, when it has this rank's (SAME_LAYOUT) of this kind.
  void restore_compression_state(const std::string& path, const nlohmann::json& manifest, bool same_layout);

  // How long a rank waits on another's checkpoint files (checkpoint.timeout_s).
  parallel::WaitBound io_bound() const {
    return {std::chrono::milliseconds(static_cast<int64_t>(config_.checkpoint.timeout_s * 1000)),
            "checkpoint.timeout_s", "waits on a peer's checkpoint files"};
  }

  const Config& config_;
  parallel::ProcessGroups& groups_;
  std::vector<parallel::ParallelParameter> params_;
  optim::Optimizer& optimizer_;
  parallel::TensorParallelRng& rng_;
  parallel::GradientSync* sync_;  // its compression state (parallel.grad_compression), per rank
  std::string parent_;            // the checkpoint the present state was saved as or loaded from; empty: none
  std::string line_;              // a hand resume's line (launch/resume_choice.h), recorded in each save
  bool parent_verified_ = false;
  std::shared_ptr<PendingSave> pending_;         // checkpoint.async: the save being written,
  std::unique_ptr<parallel::RankWork> writing_;  // by this thread
  // checkpoint.async: the save being written
  std::string run_dir_;
  nlohmann::json hf_source_;  // launch/hf_source.h: from model.init_from, or the resumed checkpoint
  nlohmann::json tokenizer_;  // launch/tokenizer_record.h: from the data, or the resumed checkpoint
  nlohmann::json data_;       // launch/data_record.h: this run's data (rank 0), once a save or resume read it
};

// model.init_from: this rank's slices of a Hugging Face model directory (its
// architecture already in CONFIG, core/hf_config.h) or a GPT-2 safetensors file. Returns the
// directory's tensors this rank read (none for a GPT-2, read whole).
std::vector<std::string> init_from_pretrained(const Config& config,
                                              const std::vector<parallel::ParallelParameter>& params, int64_t tp_rank,
                                              int64_t tp_size);

// Says, once, which tensors of the Hugging Face directory model.init_from no rank read (READ_HERE:
// this rank's), as transformers lists unexpected keys: a config.json that describes less than its
// files hold (fewer experts, a dense block where the file has a router, no biases) would otherwise
// train another model without a word. Leaves out what transformers also passes over: multi-token
// prediction layers the model does not build, rotary inv_freq buffers. Collective over GROUPS' world.
void warn_unused_hf_tensors(const Config& config, const std::vector<std::string>& read_here,
                            parallel::ProcessGroups& groups);

// The expert biases (launch/moe_metrics.h) of CONFIG's MoE blocks in the Hugging Face directory
// model.init_from (DeepSeek-V3's mlp.gate.e_score_correction_bias), one list per MoE block in
// order; empty when the model has none (model.moe.expert_bias false).
std::vector<std::vector<double>> expert_bias_from_pretrained(const Config& config);

}  // namespace loom::launch
