// `loom verify CONFIG`: is this layout's arithmetic the one-process model's? Launched like `loom
// train` (mpirun, torchrun, srun or plain), every rank trains the config's layout for --steps steps
// into RUN_DIR/layout, its first step's reduced gradients and updated weights written by global
// name (launch/step_dump.h); rank 0 then trains the same model from the same weights and data in one
// process of its own (RUN_DIR/reference; fewer layers of the same shapes when the whole model would
// not fit this machine, said so) and compares the two (launch/verify_compare.h). The verdict is the
// last line of standard output: "verdict: equal within ..." (exit 0) or "verdict: differs from step
// N ...", naming the parameters that differ most and the parallel dimension to suspect (exit 4).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/config.h"
#include "core/errors.h"
#include "launch/commands.h"
#include "launch/memory_check.h"
#include "launch/stop_signals.h"
#include "launch/verify_compare.h"
#include "parallel/launch_env.h"

extern char** environ;

namespace loom::launch {
namespace {

// The launcher's variables: the reference is a process of its own, a plain launch of world 1.
bool launcher_variable(const std::string& entry) {
  const std::string name = entry.substr(0, entry.find('='));
  for (const char* prefix : {"OMPI_", "PMIX_", "PMI_", "SLURM_", "TORCHELASTIC_"})
    if (name.rfind(prefix, 0) == 0) return true;
  for (const char* exact : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME"})
    if (name == exact) return true;
  return false;
}

// SELF with ARGS, its output into LOG; its exit status (128 + the signal if one ended it).
int run_process(const std::string& self, const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {self};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> kept;
  for (char** e = environ; *e; ++e)
    if (!launcher_variable(*e)) kept.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : kept) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int failed = posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (failed) throw EnvironmentError("loom verify: could not start " + self + ": " + std::strerror(failed));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string last_lines(const std::string& path, size_t count) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > count) lines.pop_front();
  }
  std::string text;
  for (const auto& line : lines) text += "  " + line + "\n";
  return text;
}

// The reference layout: one process, no parallelism of any kind.
const std::vector<std::string> kOneProcess = {"parallel.tp=1",
                                              "parallel.pp=1",
                                              "parallel.cp=1",
                                              "parallel.ep=1",
                                              "parallel.dp=0",
                                              "parallel.expert_tp=1",
                                              "parallel.zero_stage=0",
                                              "parallel.dp_shard=0",
                                              "parallel.virtual_stages=1",
                                              "parallel.schedule=1f1b",
                                              "parallel.sequence_parallel=false",
                                              "parallel.grad_compression=none",
                                              "parallel.grad_reduce_dtype=fp32",
                                              "parallel.dp_collectives=flat",
                                              "parallel.ranks_per_node=0"};

}  // namespace

int verify(const VerifyArgs& args, const models::PipelineModelFactory& make_model) {
  const auto& t = args.train;
  if (!t.resume.empty()) throw InputError("loom verify: --resume is not taken (both runs start from the config)");
  const auto launch = parallel::detect_launch();
  release_held_stop_signals_before_reading(t.config_path);
  Config config = load_config(t.config_path, t.overrides);
  resolve_and_validate(config, launch.world);  // bad input fails here, on every rank, before either run
  const bool mixed = config.train.precision != TrainPrecision::fp32;
  // A layout that sends its gradients in bf16 rounds them at bf16's 3 digits, as mixed precision does.
  const bool bf16_wire = config.parallel.grad_compression == GradCompression::bf16 ||
                         config.parallel.grad_reduce_dtype == GradReduceDtype::bf16;
  VerifyRuns runs;
  runs.steps = args.steps;
  runs.rtol = args.rtol > 0 ? args.rtol : mixed || bf16_wire ? 2e-2 : 1e-5;
  runs.tolerance_of = args.rtol > 0         ? "--rtol"
                      : bf16_wire && !mixed ? "gradients sent in bf16"
                                            : to_string(config.train.precision);
  runs.rounds = mixed || bf16_wire;
  runs.adamw = config.train.optimizer == OptimizerKind::adamw;
  runs.adam_eps = config.train.adam_eps;
  runs.grad_clip = config.train.grad_clip;
  const std::string dir =
      t.run_dir.empty() ? "runs/verify-" + std::filesystem::path(t.config_path).stem().string() : t.run_dir;
  runs.layout_dir = dir + "/layout";
  runs.reference_dir = dir + "/reference";

  // Both runs: the same steps, no checkpoints (the user's checkpoint.dir is left alone), no profile.
  // The schedule keeps a step to decay over, which wsd needs. No dropout: its masks are drawn per
  // rank, so a layout draws other ones than one process does.
  std::vector<std::string> common = t.overrides;
  const int64_t warmup = std::min(config.train.warmup_steps, args.steps - 1);
  for (const auto& set :
       {"train.steps=" + std::to_string(args.steps), "train.warmup_steps=" + std::to_string(warmup),
        std::string("train.exit_after=-1"), std::string("train.exit_duration_mins=0"), std::string("checkpoint.dir="),
        std::string("checkpoint.interval=0"), std::string("model.dropout=0"), std::string("model.moe.router_jitter=0"),
        std::string("log.profile_step_start=0"), std::string("log.profile_step_end=0")})
    common.push_back(set);
  if (config.train.lr_decay_style == LrDecayStyle::wsd && config.train.lr_decay_steps == 0) {
    common.push_back("train.lr_wsd_decay_steps=" +
                     std::to_string(std::min(config.train.lr_wsd_decay_steps, args.steps - warmup)));
  }
  if (config.model.dropout > 0 && launch.rank == 0) {
    std::cout << "verify: both runs train with model.dropout = 0 (the config's " << config.model.dropout
              << "): a layout draws its dropout masks per rank, so they differ from one process's\n";
  }
  if (config.model.moe.enabled() && config.model.moe.router_jitter > 0 && launch.rank == 0) {
    std::cout << "verify: both runs train with model.moe.router_jitter = 0 (the config's "
              << config.model.moe.router_jitter
              << "): a layout draws the router's noise per rank, so it differs from one process's\n";
  }
  // Capacity is applied to the tokens a rank routes: under cp, or sequence parallelism without
  // expert_tp (which gathers the whole sequence to route it), a part of each sequence, so the layout
  // drops other choices than one process does, by design.
  if (config.model.moe.enabled() && config.model.moe.capacity_factor > 0 &&
      (config.parallel.cp > 1 || (config.parallel.sequence_parallel && config.parallel.expert_tp <= 1))) {
    throw InputError("loom verify: config key 'model.moe.capacity_factor' is " +
                     std::to_string(config.model.moe.capacity_factor) + " under " +
                     (config.parallel.cp > 1 ? "cp" : "sequence parallelism") +
                     ", where each rank drops by its own part of the sequence, so the layout's numbers differ from one "
                     "process's by design; verify the layout with model.moe.capacity_factor=0 (dropless)");
  }
  // The reference must fit one process of this machine; else both runs take fewer layers.
  std::vector<std::string> reference = common;
  reference.insert(reference.end(), kOneProcess.begin(), kOneProcess.end());
  Config one = load_config(t.config_path, reference);
  resolve_and_validate(one, 1);
  try {
    check_memory_fits(one, torch::kCPU, 1);
  } catch (const InputError& e) {
    const int64_t fewer = config.parallel.pp * config.parallel.virtual_stages;
    if (fewer >= config.model.num_layers) throw;
    const std::string layers = "model.num_layers=" + std::to_string(fewer);
    common.push_back(layers);
    reference.push_back(layers);
    if (launch.rank == 0) {
      std::cout << "verify: the whole model does not fit one process here (" << e.what() << "); both runs train "
                << fewer << " of its " << config.model.num_layers << " layers, of the same shapes\n";
    }
  }

  TrainArgs layout = t;
  layout.overrides = common;
  layout.run_dir = runs.layout_dir;
  layout.overwrite_run_dir = true;
  layout.dump_first_step = runs.layout_dir + "/first_step";
  if (const int code = train(layout, make_model); code != 0) return code;
  if (launch.rank != 0) return 0;

  std::cout << "verify: the layout trained " << args.steps << " steps (" << runs.layout_dir
            << "); training the one-process reference (" << runs.reference_dir << ".log)" << std::endl;
  std::vector<std::string> command = {"train", t.config_path};
  for (const auto& set : reference) command.insert(command.end(), {"--set", set});
  command.insert(command.end(), {"--run-dir", runs.reference_dir, "--overwrite-run-dir", "--dump-first-step",
                                 runs.reference_dir + "/first_step"});
  const int code = run_process(args.self, command, runs.reference_dir + ".log");
  if (code != 0) {
    std::cout << "verify: the reference run failed (exit " << code << "); the end of " << runs.reference_dir
              << ".log:\n"
              << last_lines(runs.reference_dir + ".log", 12);
    if (code == 2) throw InputError("loom verify: the one-process reference refused the config (see above)");
    throw std::runtime_error("loom verify: the one-process reference run failed with exit " + std::to_string(code));
  }
  const auto verdict = compare_verify_runs(runs);
  for (const auto& line : verdict.report) std::cout << line << "\n";
  std::cout << verdict.line << std::endl;
  return verdict.equal ? 0 : 4;
}

}  // namespace loom::launch
