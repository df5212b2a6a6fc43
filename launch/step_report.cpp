#include "launch/step_report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "core/data_blend.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/logging.h"
#include "launch/diagnose_plan.h"
#include "launch/moe_metrics.h"
#include "launch/step_split.h"
#include "launch/thread_policy.h"
#include "parallel/cluster_spec.h"
#include "parallel/node_map.h"
#include "parallel/traffic_report.h"

namespace loom::launch {
namespace {

// LOOM_HOST overrides the name, for containers whose ranks all share one
// hostname though they sit on different machines (and for tests).
std::string host_name() {
  if (const char* host = std::getenv("LOOM_HOST")) return host;
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("unknown");
}

}  // namespace

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buffer;
}

void log_job_start(const Config& config, const parallel::LaunchEnv& env, int threads, const std::string& run_dir,
                   const torch::Device& device) {
  const auto& p = config.parallel;
  info0("{} ranks ({} launch) | tp={} pp={} dp={} cp={} ep={} | {} threads per rank | run dir {}", env.world(),
        env.info().launcher, p.tp, p.pp, p.dp, p.cp, p.ep, threads, run_dir);
  if (env.world() > 1) {
    info0("rendezvous: TCPStore at {}:{}, served by {}", env.info().master_addr, env.info().master_port,
          env.info().agent_store ? "torchrun's agent" : "rank 0");
  }
  if (device.is_cuda()) {
    info0("device: {} ({}) per rank, {} backend | precision {}", device.str(), gpu_name(device.index()),
          env.world() > 1 ? "nccl" : "no", to_string(config.train.precision));
  }
  if (p.pp > 1) {
    info0(
        "pipeline: {} schedule, {} stages x {} virtual stages, {} micro-batches per step; bubble by the formula "
        "{:.1f}%",
        to_string(p.schedule), p.pp, p.virtual_stages, config.micro_batches_per_step(),
        100.0 * parallel::formula_bubble(p.schedule, p.pp, config.micro_batches_per_step(), p.virtual_stages));
  }
  info0("model: {} layers, hidden {}, {} heads, seq {}, vocab {} | global batch {} = micro {} x {} x dp {} | data: {}",
        config.model.num_layers, config.model.hidden_size, config.model.num_heads, config.model.seq_len,
        config.model.vocab_size, config.train.global_batch_size, config.train.micro_batch_size,
        config.micro_batches_per_step(), p.dp, config.data.path.empty() ? "synthetic" : config.data.path);
  const auto& d = config.data;
  // (A split whose validation weight is 0, as Megatron-LM's 100,0,0, validates nothing.)
  if (!d.valid_path.empty() || (!d.split.empty() && parse_split(d.split, "data.split").valid > 0.0)) {
    info0("validation: {} | {} global batches {}",
          d.valid_path.empty() ? "data.split " + d.split + " of each training dataset" : d.valid_path,
          config.eval.steps,
          config.eval.interval > 0 ? "every " + std::to_string(config.eval.interval) + " steps and at the last step"
                                   : std::string("at the last step"));
  }
  if (config.model.moe.enabled()) {
    const auto& moe = config.model.moe;
    const auto layers = moe_layers(config).size();
    info0("moe: {} experts ({} per ep rank), top-{}, {} MoE blocks of {}, capacity factor {}{}, {}, z-loss x{}",
          moe.num_experts, moe.num_experts / p.ep, moe.top_k, layers, config.model.num_layers, moe.capacity_factor,
          moe.capacity_factor > 0 ? "" : " (no dropping)",
          moe.aux_loss_type == "none" ? std::string("no balance loss")
                                      : moe.aux_loss_type + " balance loss x" + fmt::format("{}", moe.aux_loss_coeff),
          moe.z_loss_coeff);
  }
}

void log_progress(const Config& config, int64_t step, double loss, double lr, double grad_norm, double step_s,
                  double mean_step_s) {
  const auto& t = config.train;
  const double tokens_per_s = static_cast<double>(t.global_batch_size * config.model.seq_len) / step_s;
  const int width = static_cast<int>(std::to_string(t.steps).size());
  info0("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tokens/s | {:.0f} ms/step | ETA {}", step,
        width, t.steps, loss, lr, grad_norm, tokens_per_s, step_s * 1000.0,
        format_duration(mean_step_s * static_cast<double>(t.steps - step)));
}

nlohmann::json pipeline_metrics(const Config& config, const std::vector<parallel::PipelineStepTiming>& stages) {
  // The step's pipeline lasts as long as its slowest stage: a stage that finishes its own list
  // early (the last one, under 1F1B) idles until then as surely as one waiting mid-step.
  double makespan = 0.0;
  for (const auto& stage : stages) makespan = std::max(makespan, stage.wall_s);
  nlohmann::json busy_ms = nlohmann::json::array(), idle = nlohmann::json::array();
  double bubble = 0.0;
  for (const auto& stage : stages) {
    busy_ms.push_back(stage.busy_s * 1000.0);
    const double waiting = makespan > 0 ? std::max(0.0, 1.0 - stage.busy_s / makespan) : 0.0;
    idle.push_back(waiting);
    bubble += waiting / static_cast<double>(stages.size());
  }
  return {
      {"schedule", to_string(config.parallel.schedule)},
      {"stage_busy_ms", busy_ms},
      {"stage_idle", idle},  // each stage's share of its step spent waiting
      {"bubble", bubble},
      {"bubble_formula", parallel::formula_bubble(config.parallel.schedule, config.parallel.pp,
                                                  config.micro_batches_per_step(), config.parallel.virtual_stages)}};
}

nlohmann::json gather_memory_report(parallel::ProcessGroups& groups, const parallel::ModelStateBytes& state,
                                    int64_t optimizer_bytes, int64_t activation_bytes) {
  auto mine = torch::tensor(
      {static_cast<double>(state.params), static_cast<double>(state.grads), static_cast<double>(optimizer_bytes),
       static_cast<double>(activation_bytes), static_cast<double>(state.master)},
      torch::kFloat64);
  auto all = torch::empty({groups.world(), 5}, torch::kFloat64);
  groups.world_comm().all_gather(all, mine).wait();
  nlohmann::json ranks = nlohmann::json::array();
  for (int64_t r = 0; r < groups.world(); ++r) {
    ranks.push_back({{"rank", r},
                     {"params_bytes", static_cast<int64_t>(all[r][0].item<double>())},
                     {"grads_bytes", static_cast<int64_t>(all[r][1].item<double>())},
                     // fp32 training: the parameters are the master weights (0 here)
                     {"master_bytes", static_cast<int64_t>(all[r][4].item<double>())},
                     {"optimizer_bytes", static_cast<int64_t>(all[r][2].item<double>())},
                     // The peak above the model state during the first step's forward and backward:
                     // activations kept for backward and temporaries (-1: not measured).
                     {"activation_peak_bytes", static_cast<int64_t>(all[r][3].item<double>())}});
  }
  return ranks;
}

std::vector<int64_t> job_nodes(parallel::ProcessGroups& groups, int64_t local_world, const Config& config) {
  return parallel::discover_nodes(groups.world_comm(), host_name(), local_world, config.parallel.ranks_per_node);
}

namespace {

// Removes RUN_DIR/comm_rankN.json for the ranks N >= WORLD: an earlier run in the directory at more
// ranks (one resumed at fewer) left them, and they would read as this run's.
void remove_other_worlds_counters(const std::string& run_dir, int64_t world) {
  static const std::regex counters(R"(comm_rank(\d{1,9})\.json)");
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir, error)) {
    std::smatch rank;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, rank, counters) && std::stoll(rank[1]) >= world) std::filesystem::remove(entry, error);
  }
}

}  // namespace

nlohmann::json write_traffic_reports(parallel::ProcessGroups& groups, const parallel::CommStats& stats,
                                     const parallel::RankGrid& grid, const TrainSummary& summary,
                                     const std::string& run_dir, int64_t local_world, const Config& config) {
  // A run that trained nothing (a resume with nothing to do) leaves the trained run's reports as they are.
  if (summary.steps == 0) return nullptr;  // (every rank alike: the same summary)
  std::ofstream(run_dir + "/comm_rank" + std::to_string(groups.rank()) + ".json") << stats.to_json().dump(2) << "\n";
  if (groups.rank() == 0) remove_other_worlds_counters(run_dir, groups.world());
  auto report = parallel::gather_traffic_report(groups, stats, summary.steps, host_name(), local_world,
                                                config.parallel.ranks_per_node);
  if (report.is_null()) return report;
  report["diagnostics"] = parallel::traffic_diagnostics(report, grid);
  report["last_step"] = summary.last_step;
  report["stopped_early"] = summary.stopped_early();  // (its last step saved: loom plan --run counts it)
  report["stopped_by"] = summary.stopped_by;  // (scripts/sbatch_example.sh requeues after train.exit_duration_mins)
  report["resumed"] = summary.resume_requested;
  std::ofstream(run_dir + "/traffic.json") << report.dump(1) << "\n";
  if (groups.world() > 1) std::cout << parallel::format_traffic_table(report) << std::flush;
  return report;
}

void note_inter_node(nlohmann::json& diagnosis, const nlohmann::json& traffic) {
  if (diagnosis.is_null() || traffic.is_null() || !diagnosis.contains("verdict")) return;
  auto& verdict = diagnosis["verdict"];
  if (verdict.value("kind", "") != "communication-bound") return;
  const std::string group = verdict.value("where", "");
  double sent = 0, inter = 0;
  for (const auto& rank : traffic.at("ranks")) {
    if (!rank.contains("groups") || !rank["groups"].contains(group)) continue;
    for (const auto& [op, c] : rank["groups"][group].items()) {
      sent += c.value("sent", 0.0);
      inter += c.value("sent_inter_node", 0.0);
    }
  }
  if (inter <= 0 || sent <= 0) return;
  verdict["link"] = "inter-node";
  char share[96];
  std::snprintf(share, sizeof(share), "; inter-node: %.0f%% of %s's bytes crossed nodes", 100.0 * inter / sent,
                group.c_str());
  verdict["detail"] = verdict.value("detail", "") + share;
}

std::string log_job_end(const Config& config, const TrainSummary& summary, const std::string& run_dir,
                        double flops_per_token, int world, const torch::Device& device) {
  if (summary.steps == 0) {
    info0("done: no step was left to train; the run directory {} is as it was", run_dir);
    return "";
  }
  info0("done: {} steps in {} | loss {:.4f} -> {:.4f} | {:.0f} tokens/s | metrics in {}/metrics.jsonl", summary.steps,
        format_duration(summary.seconds), summary.first_loss, summary.last_loss, summary.tokens_per_s, run_dir);
  if (flops_per_token <= 0.0) return "";
  const double tflops = flops_per_token * summary.tokens_per_s / static_cast<double>(world) / 1e12;
  double peak = config.train.peak_tflops;
  std::string source = "train.peak_tflops";
  if (peak <= 0.0 && device.is_cuda()) {
    const std::string name = gpu_name(device.index());
    peak = known_bf16_peak_tflops(name);
    source = (name.empty() ? std::string("unnamed GPU") : name) + ", dense bf16 data-sheet peak";
  }
  std::string mfu;
  if (peak > 0.0) {
    mfu = fmt::format("MFU {:.1f}% of {:g} TFLOP/s per device ({})", 100.0 * tflops / peak, peak, source);
  } else if (device.is_cuda()) {
    mfu = "MFU: the peak of " + gpu_name(device.index()) + " is not known to loom (set train.peak_tflops)";
  } else {
    mfu = "MFU: no peak assumed on CPU (set train.peak_tflops)";
  }
  info0("model FLOPs: {:.4g} GFLOP per token (6 x weights + 12 L h S) | {:.4g} TFLOP/s per rank | {}",
        flops_per_token / 1e9, tflops, mfu);
  return mfu;
}

void write_diagnosis(const TrainSummary& summary, const std::string& run_dir, bool print) {
  if (summary.diagnosis.is_null() || summary.steps == 0) return;
  std::ofstream(run_dir + "/diagnosis.json") << summary.diagnosis.dump(1) << "\n";
  if (print) std::cout << format_diagnosis(summary.diagnosis) << std::flush;
}

int diagnose(const std::string& run_dir, const std::string& cluster_path) {
  const std::string path = run_dir + "/diagnosis.json";
  std::ifstream in(path);
  if (!in) throw InputError("loom diagnose: " + path + " is missing (a run of this version writes it when it ends)");
  nlohmann::json diagnosis;
  try {
    diagnosis = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError("loom diagnose: " + path + " is not JSON: " + e.what());
  }
  Config config;
  std::optional<parallel::ClusterSpec> cluster;
  if (!cluster_path.empty()) {
    const std::string config_path = run_dir + "/config.yaml";
    if (!std::filesystem::exists(config_path))
      throw InputError("loom diagnose --cluster: " + config_path + " is missing (the run's layout)");
    config = load_config(config_path);
    const auto& p = config.parallel;
    resolve_and_validate(config, p.tp * p.cp * p.pp * p.dp);
    cluster = cluster_to_compare(config, cluster_path, "loom diagnose --cluster: '" + run_dir + "'");
  }
  std::string text;
  try {
    if (cluster) {
      // Each collective's measured time per call against the cluster's alpha-beta (traffic.json:
      // every rank's counters; a run of this version writes it when it ends).
      nlohmann::json traffic;
      std::ifstream traffic_file(run_dir + "/traffic.json");
      if (traffic_file) traffic = nlohmann::json::parse(traffic_file);
      add_plan_comparison(diagnosis, config, *cluster, traffic);
    }
    text = format_diagnosis(diagnosis);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("loom diagnose: " + path + " (or the run's traffic.json) is not a diagnosis this version reads (" +
                     e.what() + ")");
  }
  std::cout << text << std::flush;
  return 0;
}

}  // namespace loom::launch
