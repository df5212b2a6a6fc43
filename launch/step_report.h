// What a run tells its user: the startup lines, the progress line of a step,
// the per-step metrics records that are not the loss (pipeline bubble, memory),
// the end-of-run summary with model FLOPs and MFU, and the traffic reports.
// Lines print on rank 0 (core/logging.h); collective functions say so.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "parallel/comm_stats.h"
#include "parallel/gradient_sync.h"
#include "parallel/launch_env.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"
#include "parallel/rank_grid.h"

namespace loom::launch {

struct TrainSummary {
  int64_t steps = 0;  // run in this job
  int64_t last_step = 0;
  bool resume_requested = false;  // --resume given: ZeRO-3 gathered its units to read a checkpoint into
  std::string stopped_by;  // "a signal", "train.exit_after" or "train.exit_duration_mins"; empty: not stopped early
  bool stopped_early() const { return !stopped_by.empty(); }
  bool agent_lost = false;  // stopped because a torchrun agent of the job died (with its ranks' signal)
  double first_loss = 0.0;
  double last_loss = 0.0;
  double seconds = 0.0;
  double tokens_per_s = 0.0;
  nlohmann::json diagnosis;  // rank 0: where the step time went (launch/step_split.h); null elsewhere
};

// "1:02:03" or "2:03".
std::string format_duration(double seconds);

// The layout, threads, device, pipeline, model and MoE lines before the first step.
void log_job_start(const Config& config, const parallel::LaunchEnv& env, int threads, const std::string& run_dir,
                   const torch::Device& device);

void log_progress(const Config& config, int64_t step, double loss, double lr, double grad_norm, double step_s,
                  double mean_step_s);

// Each stage's busy time, the measured bubble (the idle share of each stage's
// pipeline time, averaged over stages) and the formula's (p-1)/(m v + p-1).
nlohmann::json pipeline_metrics(const Config& config, const std::vector<parallel::PipelineStepTiming>& stages);

// Collective over the world: every rank's bytes of parameters, gradients, master
// weights and optimizer state, and ACTIVATION_BYTES (-1: not measured).
nlohmann::json gather_memory_report(parallel::ProcessGroups& groups, const parallel::ModelStateBytes& state,
                                    int64_t optimizer_bytes, int64_t activation_bytes);

// Collective over the world: every rank's node (parallel/node_map.h) from this host's name
// (LOOM_HOST overrides it), LOCAL_WORLD and CONFIG's parallel.ranks_per_node.
std::vector<int64_t> job_nodes(parallel::ProcessGroups& groups, int64_t local_world, const Config& config);

// Collective: this rank's counters in RUN_DIR/comm_rankN.json, the job's traffic
// matrix and diagnostics in RUN_DIR/traffic.json and, with several ranks, its table.
// LOCAL_WORLD (the launcher's local world size) and CONFIG's parallel.ranks_per_node tell the nodes apart.
// Returns the traffic report on rank 0 (null on the others).
nlohmann::json write_traffic_reports(parallel::ProcessGroups& groups, const parallel::CommStats& stats,
                                     const parallel::RankGrid& grid, const TrainSummary& summary,
                                     const std::string& run_dir, int64_t local_world, const Config& config);

// A communication-bound DIAGNOSIS whose group sent bytes across nodes (TRAFFIC: the report) says
// so: the verdict's link "inter-node" and the share of the group's bytes that crossed, in its detail.
void note_inter_node(nlohmann::json& diagnosis, const nlohmann::json& traffic);

// The "done:" line, then, given FLOPS_PER_TOKEN (> 0), model FLOPs per second per rank
// and their share of the device's peak (MFU) when one is configured or known:
// train.peak_tflops, else the GPU's dense bf16 data-sheet peak (core/device.h). No
// peak is assumed on CPU. Returns that MFU phrase ("MFU 44.0% of 989 TFLOP/s per device (...)",
// or why there is none); empty without model FLOPs.
std::string log_job_end(const Config& config, const TrainSummary& summary, const std::string& run_dir,
                        double flops_per_token, int world, const torch::Device& device);

// Rank 0: SUMMARY's diagnosis into RUN_DIR/diagnosis.json and, if PRINT, with its verdict last, to
// standard output (launch/step_split.h; `loom diagnose RUN_DIR` prints it again).
void write_diagnosis(const TrainSummary& summary, const std::string& run_dir, bool print = true);

}  // namespace loom::launch
