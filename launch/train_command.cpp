// `loom train` (and a user's own program through train_main): the checks that need no peer, the
// rendezvous, the process groups and the run directory, then the Trainer.
#include <chrono>
#include <filesystem>

#include "core/checkpoint_store.h"
#include "core/config_inert.h"
#include "core/cpu_memory.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/logging.h"
#include "launch/communicator_factory.h"
#include "launch/config_agreement.h"
#include "launch/diagnose_plan.h"
#include "launch/directory_lock.h"
#include "launch/memory_check.h"
#include "launch/resume_choice.h"
#include "launch/run_directory.h"
#include "launch/step_report.h"
#include "launch/stop_signals.h"
#include "launch/supported_combinations.h"
#include "launch/thread_policy.h"
#include "launch/trainer.h"
#include "parallel/alpha_beta_probe.h"
#include "parallel/heartbeat.h"
#include "parallel/launch_env.h"

namespace loom::launch {

int train(const TrainArgs& args, const models::PipelineModelFactory& make_model) {
  const auto job_start = std::chrono::steady_clock::now();  // train.exit_duration_mins counts from here
  release_held_stop_signals_before_reading(args.config_path);
  Config config = load_config(args.config_path, args.overrides);
  // Named first: the data check below would measure the data against a model never read.
  if (std::error_code error; !config.model.init_from.empty() && !std::filesystem::exists(config.model.init_from, error))
    throw InputError("model.init_from: '" + config.model.init_from +
                     "' does not exist (a Hugging Face model directory or a .safetensors file)" +
                     (args.resume.empty() ? std::string()
                                          : "; a resume still reads the model's shape from it: to resume without "
                                            "the original, point model.init_from at `loom export CHECKPOINT "
                                            "--format hf --output DIR`, which writes it again from the checkpoint"));
  // Every check that needs no peer comes before the rendezvous: a bad config then fails every rank
  // alike and at once, and no rank is left waiting on the store for ranks that already left.
  const parallel::LaunchInfo launch = parallel::detect_launch();
  init_logging(launch.rank, launch.world);
  resolve_and_validate(config, launch.world);
  for (const auto& warning : inert_key_warnings(config)) warn0("{}", warning);
  if (args.allow_data_change && args.resume.empty()) warn0("--allow-data-change does nothing without --resume");
  if (!args.resume.empty() && args.resume != "auto" && config.checkpoint.dir.empty()) {
    warn0(
        "--resume {}: checkpoint.dir is not set, so this run saves no checkpoint of its own progress (set "
        "checkpoint.dir to keep it)",
        args.resume);
  }
  // A --resume CHECKPOINT without a manifest is refused before the run and checkpoint folders are
  // made; read_manifest says why (a deleted step, checkpoint.dir given). The full check of its files,
  // on rank 0, waits for the peers: every rank reading a large manifest here would be work twice.
  // (A restarted scheduler job's may be gone by design: checkpoint.keep removed it after the job
  // saved newer ones, which the restart continues: launch/resume_choice.h. Refused here too when the
  // job saved none on its line: a rare case, where every rank reading the manifests costs little.)
  std::error_code no_manifest;
  const bool restarted_job = !parallel::first_attempt() && !scheduler_job().empty();
  if (!args.resume.empty() && args.resume != "auto" &&
      !std::filesystem::is_regular_file(std::filesystem::path(args.resume) / "manifest.json", no_manifest) &&
      (!restarted_job ||
       saved_since_by_job(args.resume, config, scheduler_job(), hand_resume_line(config, args.resume)).empty())) {
    try {
      read_manifest(args.resume);
    } catch (const InputError& e) {
      throw InputError("--resume " + args.resume + ": " + e.what());
    }
  }
  const torch::Device device = resolve_train_device(config.train.device, launch.local_rank, launch.local_world);
  use_device(device);
  require_supported(config, device, launch.world);
  const auto& p = config.parallel;
  parallel::RankGrid grid({p.tp, p.pp, p.dp, p.ep, p.cp, p.dp_shard}, p.order);
  grid.require_even_hsdp();  // an uneven HSDP cut of an expert-dp group: exit 2 naming parallel.dp_shard
  check_fault_injection(args.fault, config, grid);
  check_data(config);  // a dataset the model cannot read fails here, on every rank, before step 1
  check_memory_fits(config, device, launch.local_world);  // before anything is allocated
  const auto cluster = cluster_to_compare(config, config.log.cluster, "log.cluster");
  // The prediction hides HSDP's step across the replicas only where the cluster's backend does
  // (parallel/later_steps.h): this run's ranks talk over NCCL on GPUs, Gloo on CPUs.
  if (const std::string run_backend = device.is_cuda() ? "nccl" : "gloo";
      cluster && grid.hsdp() && cluster->backend != run_backend) {
    log::warn(
        "log.cluster: {} says backend {}, but this run's ranks talk over {}: the prediction counts HSDP's "
        "all-reduce across the replicas as {} runs it (add 'backend: {}' to the cluster file to compare "
        "like with like)",
        config.log.cluster, cluster->backend, run_backend, cluster->backend, run_backend);
  }

  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000.0));
  // Every check that needs no peer is done: a stop signal that came meanwhile ends the process now.
  release_held_stop_signals();
  parallel::LaunchEnv env(timeout);
  parallel::Heartbeat heartbeat(env.connect_store(), env.rank(), env.world(), env.store_server_rank(),
                                std::chrono::seconds(1), env.store_reconnector());
  agree_on_config(config, !args.resume.empty(), env);  // before any collective: a different shape would fail inside one
  const int threads = apply_thread_policy(config, env.info());
  CpuMemory::install();  // before the model exists, so that its step's allocations are counted
  CpuMemory::keep_freed_memory();

  auto stats = std::make_shared<parallel::CommStats>();
  heartbeat.watch(stats->presence());  // so that a timeout can name a live rank stuck outside its collectives
  try {
    const auto factory = communicator_factory(env, device, stats, timeout);
    parallel::ProcessGroups groups(grid, env.rank(), factory, stats);
    if (config.parallel.dp_collectives == DpCollectives::hierarchical) {
      groups.use_two_level_gradient_groups(job_nodes(groups, env.info().local_world, config), factory);
    }
    const RunDirectory run = agree_on_run_dir(args, config, env);
    const std::string& run_dir = run.path;
    if (!args.dump_first_step.empty()) {
      // No first-step files of an earlier loom verify here: cleared once this job holds the run
      // directory (a second job in it is refused first), before any rank can reach step 1.
      if (env.rank() == 0) std::filesystem::remove_all(args.dump_first_step);
      groups.world_comm().barrier().wait();
    }

    Trainer trainer(config, groups, run_dir, make_model, args.fault, device);
    if (!args.dump_first_step.empty()) trainer.dump_first_step(args.dump_first_step);
    trainer.set_job_start(job_start);
    log_job_start(config, env, threads, run_dir, device);
    TrainSummary summary = trainer.run(args.resume, args.allow_data_change);
    const auto traffic = write_traffic_reports(groups, *stats, grid, summary, run_dir, env.info().local_world, config);
    note_inter_node(summary.diagnosis, traffic);
    groups.world_comm().barrier().wait();
    const auto mfu = log_job_end(config, summary, run_dir, args.flops_per_token ? args.flops_per_token(config) : 0.0,
                                 env.world(), device);
    // A compute-bound verdict says how far from the device's peak the compute runs.
    if (!summary.diagnosis.is_null() && !mfu.empty()) summary.diagnosis["mfu"] = mfu;
    if (cluster) {
      // Every rank measures its groups' links (collective); rank 0's diagnosis sets them beside the cluster's.
      // Each all-reduce kept well inside parallel.timeout_s: a slow link that trained fine must not
      // fail the finished run in its measurement.
      parallel::AlphaBetaProbeOptions probe;
      probe.max_call_s = config.parallel.timeout_s / 4;
      const auto links = parallel::probe_alpha_beta(groups, device, probe);
      if (!summary.diagnosis.is_null()) add_plan_comparison(summary.diagnosis, config, *cluster, traffic, links);
    }
    // loom verify's runs keep theirs in diagnosis.json: its own verdict is the one to read.
    write_diagnosis(summary, run_dir, /*print=*/args.dump_first_step.empty());
    // Every rank's heartbeat stops before any rank leaves: a beat that reached the store after its
    // rank had exited printed c10d's "recvValue failed" trace at the end of a finished run.
    heartbeat.stop();
    groups.world_comm().barrier().wait();
    // Another agent died and its ranks saved and stopped; this one's agent lives. Exit 0 would tell
    // it the job is finished (it then waits in its exit barrier); failing, the rank is restarted with
    // the ranks that are left (an elastic --nnodes MIN:MAX), from the checkpoint just saved.
    if (summary.agent_lost && torchrun_agent_alive()) {
      throw EnvironmentError(
          "another torchrun agent of this job died, and its ranks saved step " + std::to_string(summary.last_step) +
          " and stopped: this rank exits 75 so that its own agent restarts it (--max_restarts) "
          "with the ranks that are left (torchrun --nnodes MIN:MAX), to resume from that checkpoint");
    }
  } catch (const CommError& e) {
    // A timeout cannot say which peer it waited for; the heartbeats can, three beats apart: a rank
    // that stopped beating, or one that beats but is in no collective.
    const std::string silent = heartbeat.silent_ranks(std::chrono::seconds(3));
    if (silent.empty()) throw;
    throw CommError(std::string(e.what()) + "; " + silent);
  }
  return 0;
}

}  // namespace loom::launch
