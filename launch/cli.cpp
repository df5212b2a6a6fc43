#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/config_fields.h"
#include "core/device.h"
#include "core/errors.h"
#include "launch/commands.h"
#include "launch/exit_on_error.h"
#include "launch/stop_signals.h"
#include "models/gpt.h"
#include "models/gpt_flops.h"
#include "parallel/launch_env.h"

namespace loom::launch {
namespace {

// ck/step_N/ is ck/step_N (its parent, checkpoint.dir, decides the run directory); "" names no checkpoint.
std::string without_trailing_slashes(std::string path) {
  if (path.empty()) throw CLI::ValidationError("is empty: give auto or a checkpoint");
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

constexpr const char* kExitCodes =
    "exit codes: 0 success, 2 bad input (config, arguments, data), 3 the run diverged (train.max_skipped_steps\n"
    "non-finite steps in a row), 4 loom verify found the layout's numbers differ, 75 the machine failed the run\n"
    "(disk full, file system error: requeue), 1 anything else";

// No job has more ranks: a larger --world only overflows the sizes planned from it.
constexpr int64_t kMaxWorld = int64_t{1} << 30;

int64_t parse_integer(const std::string& flag, const std::string& text, int64_t min,
                      int64_t max = std::numeric_limits<int64_t>::max()) {
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < min) {
    throw InputError(flag + " expects an integer of at least " + std::to_string(min) + ", got '" + text + "'");
  }
  // (strtoll saturates past its range, and says so only in errno.)
  if (errno == ERANGE || value > max)
    throw InputError(flag + " expects an integer of at most " + std::to_string(max) + ", got '" + text + "'");
  return value;
}

void add_overrides(CLI::App& command, std::vector<std::string>& overrides) {
  command.add_option("--set", overrides, "override a config key (repeatable, applied in order): --set train.steps=50")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

CLI::Option* add_config(CLI::App& command, std::string& path) {
  return command.add_option("CONFIG.yaml", path, "the job's config")->type_name("");
}

// `loom train`'s flags, which a user's own program (train_main) takes too, and `loom verify`'s
// (VERIFY: its own --run-dir, and none of a resume's: both of its runs start from the config).
// Returns what gives the TrainArgs once they are parsed (converting --inject-fault).
std::function<TrainArgs()> add_train_flags(CLI::App& command, bool verify = false) {
  auto args = std::make_shared<TrainArgs>();
  auto fault = std::make_shared<std::string>();
  add_config(command, args->config_path)->required();
  add_overrides(command, args->overrides);
  command
      .add_option("--run-dir", args->run_dir,
                  verify
                      ? "where the two runs go, as DIR/layout and DIR/reference (default runs/verify-CONFIGNAME, "
                        "replaced by each verify)"
                      : "where config.yaml, metrics.jsonl and comm_rankR.json go (default runs/CONFIGNAME-DATE-TIME)")
      ->type_name("DIR");
  if (!verify) {
    command.add_flag("--overwrite-run-dir", args->overwrite_run_dir,
                     "start a fresh run in a --run-dir that holds another run's metrics.jsonl, replacing it");
    command
        .add_option("--resume", args->resume, "continue from the newest checkpoint in checkpoint.dir, or CHECKPOINT")
        ->type_name("auto|CHECKPOINT")
        ->transform(without_trailing_slashes, "", "");
    command.add_flag("--allow-data-change", args->allow_data_change,
                     "resume even though the data (data.path, its weights or datasets, data.split, data.order, the "
                     "shuffle's train.seed) differs from the checkpoint's: go on at its count of consumed samples in "
                     "the new order");
  }
  CLI::Option* fault_option = command.add_option(
      "--inject-fault", *fault,
      "for tests: rank RANK fails at step STEP by KIND (kill, hang, kill_in_save, fail_save, overflow; "
      "slow: 100 ms more per step from STEP on; scale:GROUP:EPS: one collective of GROUP, tp, cp, dp, "
      "pp or ep, has its result scaled by 1 + EPS at STEP; from STEP on, delay:GROUP:MS sleeps before "
      "each collective of GROUP, slow-data:MS before each batch read, straggler:RANK:MS once a step; "
      "slow_save:MS: writing the checkpoint saved after STEP takes MS longer; slow_resume:MS: rank 0 "
      "takes MS longer to check the checkpoints of a resume); on the first attempt only, so that a job "
      "restarted by torchrun --max_restarts or a SLURM requeue (TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT "
      "above 0) runs through");
  fault_option->type_name("RANK:STEP:KIND");
  // loom verify's reference run writes its first step's tensors (not for users: loom verify says where).
  command.add_option("--dump-first-step", args->dump_first_step)->group("");
  command.footer(config_keys_help() + "\n" + kExitCodes);
  return [args, fault, fault_option] {
    TrainArgs parsed = *args;
    if (fault_option->count() > 0) parsed.fault = parse_fault(*fault);  // '' too: refused, not no fault
    // A restarted job repeats its command line; the failure it tests has already happened.
    if (!parallel::first_attempt()) parsed.fault = {};
    return parsed;
  };
}

// Each command adds its subcommand and flags to LOOM and returns what runs it once they are parsed.
// Numbers (--world N, --top K) arrive as text and are converted then, so that their messages
// are loom's: "--world expects an integer of at least 1, got 'x'".
using Command = std::function<int()>;

Command add_train(CLI::App& loom) {
  auto parsed = add_train_flags(*loom.add_subcommand("train", "train a model from a YAML config"));
  return [parsed] {
    TrainArgs args = parsed();
    args.flops_per_token = models::gpt_flops_per_token;
    return train(args, models::make_gpt_piece);
  };
}

double parse_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) {
    throw InputError(flag + " expects a number, got '" + text + "'");
  }
  return value;
}

// `loom verify`'s flags, which a user's own program takes after `verify` (train_main); returns what
// gives the VerifyArgs once they are parsed, SELF this program (which trains the reference).
std::function<VerifyArgs()> add_verify_flags(CLI::App& command) {
  auto parsed = add_train_flags(command, true);
  auto steps = std::make_shared<std::string>("5"), rtol = std::make_shared<std::string>("0");
  command.add_option("--steps", *steps, "steps both runs train")->type_name("N")->capture_default_str();
  command.add_option("--rtol", *rtol, "relative tolerance; 0: 1e-5 in fp32, 2e-2 under bf16")->type_name("R");
  return [parsed, steps, rtol] {
    VerifyArgs args;
    args.train = parsed();
    args.steps = parse_integer("--steps", *steps, 1);
    args.rtol = parse_number("--rtol", *rtol);
    if (!(args.rtol >= 0.0) || !std::isfinite(args.rtol)) {
      throw InputError("--rtol expects a finite tolerance of at least 0 (0: the precision's default), got '" + *rtol +
                       "'");
    }
    args.self = std::filesystem::read_symlink("/proc/self/exe").string();
    return args;
  };
}

constexpr const char* kVerifyHelp =
    "train CONFIG's layout and a one-process reference from the same weights and data, and compare their losses "
    "and first step's gradients and weights: exit 0 equal, 4 not";

Command add_verify(CLI::App& loom) {
  auto parsed = add_verify_flags(*loom.add_subcommand("verify", kVerifyHelp));
  return [parsed] {
    VerifyArgs args = parsed();
    args.train.flops_per_token = models::gpt_flops_per_token;
    return verify(args, models::make_gpt_piece);
  };
}

Command add_diagnose(CLI::App& loom) {
  auto& command = *loom.add_subcommand(
      "diagnose",
      "where a run's step time went (compute, exposed communication per group, pipeline idle, data, "
      "optimizer, checkpoints) and the verdict: compute-, communication-, bubble-, memory-, input- or "
      "straggler-bound");
  auto run_dir = std::make_shared<std::string>(), cluster = std::make_shared<std::string>();
  command.add_option("RUN_DIR", *run_dir, "a run directory (its diagnosis.json)")->type_name("")->required();
  command.add_option("--cluster", *cluster, "beside loom plan's prediction for the run's layout on this cluster")
      ->type_name("CLUSTER.yaml");
  return [run_dir, cluster] { return diagnose(*run_dir, *cluster); };
}

Command add_topology(CLI::App& loom) {
  auto& command = *loom.add_subcommand("topology", "print every group of a layout and each rank's coordinates as JSON");
  auto args = std::make_shared<TopologyArgs>();
  auto world = std::make_shared<std::string>();
  add_config(command, args->config_path)->required();
  command.add_option("--world", *world, "ranks in the job")->type_name("N")->required();
  add_overrides(command, args->overrides);
  return [args, world] {
    args->world = parse_integer("--world", *world, 1, kMaxWorld);
    return topology(*args);
  };
}

Command add_schedule(CLI::App& loom) {
  auto& command = *loom.add_subcommand("schedule", "print the simulated pipeline timeline and bubble of a layout");
  auto args = std::make_shared<TopologyArgs>();
  auto world = std::make_shared<std::string>();
  add_config(command, args->config_path)->required();
  command.add_option("--world", *world, "ranks in the job (default tp x pp x dp of the config)")->type_name("N");
  add_overrides(command, args->overrides);
  return [args, world] {
    if (!world->empty()) args->world = parse_integer("--world", *world, 1, kMaxWorld);
    return schedule(*args);
  };
}

Command add_plan(CLI::App& loom) {
  auto& command = *loom.add_subcommand(
      "plan", "rank layouts on a cluster by the cost model, or set a finished run's traffic beside it");
  auto args = std::make_shared<PlanArgs>();
  auto world = std::make_shared<std::string>(), run = std::make_shared<std::string>();
  auto top = std::make_shared<std::string>(std::to_string(args->top));
  CLI::Option* config = add_config(command, args->config_path);
  CLI::Option* cluster =
      command.add_option("--cluster", args->cluster_path, "the cluster (configs/clusters/)")->type_name("CLUSTER.yaml");
  CLI::Option* world_flag =
      command.add_option("--world", *world, "ranks to plan for (default the whole cluster)")->type_name("N");
  CLI::Option* top_flag = command.add_option("--top", *top, "layouts to show")->type_name("K")->capture_default_str();
  add_overrides(command, args->overrides);
  command.add_option("--run", *run, "a finished run: the cost model's traffic beside its counters")
      ->type_name("RUN_DIR")
      ->excludes(config)
      ->excludes(cluster)
      ->excludes(world_flag)
      ->excludes(top_flag)
      ->excludes(command.get_option("--set"));
  command.footer(
      "forms:\n"
      "  loom plan CONFIG.yaml --cluster CLUSTER.yaml [--world N] [--top K]: layouts ranked by the cost model\n"
      "  loom plan CONFIG.yaml --world N: model-state bytes per rank for each ZeRO stage\n"
      "  loom plan --run RUN_DIR: a finished run's traffic as the cost model predicts it, beside its counters");
  return [args, world, top, run] {
    if (!run->empty()) return plan_run(*run);
    if (args->config_path.empty()) {
      throw InputError("loom plan: CONFIG.yaml or --run RUN_DIR is required (see 'loom plan --help')");
    }
    if (!world->empty()) args->world = parse_integer("--world", *world, 1, kMaxWorld);
    args->top = parse_integer("--top", *top, 1);
    return plan(*args);
  };
}

Command add_export(CLI::App& loom) {
  auto& command = *loom.add_subcommand(
      "export", "write a checkpoint as a Hugging Face model directory (config.json, safetensors) for from_pretrained");
  auto args = std::make_shared<ExportArgs>();
  command.add_option("CHECKPOINT", args->checkpoint, "a checkpoint directory (step_N)")->type_name("")->required();
  command
      .add_option("--format", args->format,
                  "hf: the architecture the model came from (model.init_from's config.json, its fields kept: "
                  "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                  "MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM), else GPT-2 or Llama by the "
                  "model's positions; hf-llama (the Llama-family class the model needs: LlamaForCausalLM, "
                  "Qwen2ForCausalLM for biases on q, k, v only, Qwen3's or a mixture of experts' class) or hf-gpt2 "
                  "(GPT2LMHeadModel) to choose")
      ->type_name("FORMAT")
      ->capture_default_str();
  command
      .add_option("--output", args->output,
                  "the directory to write: new, empty or an earlier loom export (then replaced whole); hf-gpt2 also "
                  "writes one FILE.safetensors as before")
      ->type_name("DIR")
      ->required();
  command
      .add_option("--max-shard-size", args->max_shard_size,
                  "shard the weights above this size (5GB = 5 x 10^9 bytes; MB, KB, GiB, MiB, KiB or bytes too)")
      ->type_name("SIZE")
      ->capture_default_str();
  return [args] { return export_checkpoint(*args); };
}

Command add_prepare(CLI::App& loom) {
  auto& command =
      *loom.add_subcommand("prepare", "turn text files into a Megatron-LM indexed dataset (PREFIX.bin and PREFIX.idx)");
  auto args = std::make_shared<PrepareArgs>();
  command
      .add_option("--input", args->inputs,
                  "text files, each one document, or JSON lines (*.jsonl, *.json, *.ndjson), each line one document; "
                  "either read through gzip or zstd when named *.gz, *.zst or *.zstd (a.jsonl.gz)")
      ->type_name("FILE")
      ->required()
      // CLI11 takes the next word for a FILE even when it is a flag: `--input --output d` read as
      // two inputs was refused as "--output is required".
      ->check(
          [](const std::string& value) {
            return value.rfind("--", 0) == 0
                       ? "'" + value + "' is a flag where a FILE goes (a file of that name: ./" + value + ")"
                       : std::string();
          },
          "");
  command.add_option("--output", args->output_prefix, "the dataset's path without .bin, .idx or .json")
      ->type_name("PREFIX")
      ->required();
  command
      .add_option("--tokenizer", args->tokenizer,
                  "byte (each byte a token, 256 ends a document), a SentencePiece *.model, or a Hugging Face "
                  "tokenizer.json, or a model directory holding either (tokenizer.json first)")
      ->type_name("SPEC")
      ->capture_default_str();
  command.add_flag("--split-paragraphs", args->split_paragraphs,
                   "a document per blank-line separated paragraph instead of per file or JSON line");
  command.add_option("--json-key", args->json_key, "the key of a JSON line's text")
      ->type_name("KEY")
      ->capture_default_str();
  command.add_flag("--add-bos", args->add_bos, "start each document with the tokenizer's BOS token");
  command.add_flag("--append-eod", args->append_eod,
                   "end each document with the tokenizer's EOS token (byte tokenizer: id 256)");
  command.add_option("--workers", args->workers, "tokenizing threads (the output is the same for any number)")
      ->type_name("N")
      ->capture_default_str();
  return [args] { return prepare(*args); };
}

Command add_generate(CLI::App& loom) {
  auto& command = *loom.add_subcommand(
      "generate", "continue a prompt with a model (a loom checkpoint or a Hugging Face directory), with a KV cache");
  auto args = std::make_shared<GenerateArgs>();
  auto max_new = std::make_shared<std::string>(), temperature = std::make_shared<std::string>("1"),
       top_k = std::make_shared<std::string>("0"), top_p = std::make_shared<std::string>("1"),
       seed = std::make_shared<std::string>("0");
  command
      .add_option("MODEL", args->model,
                  "a loom checkpoint (step_N, or a checkpoint.dir: its latest) or a Hugging Face model directory")
      ->type_name("")
      ->required();
  command.add_option("--prompt", args->prompt, "the text to continue")->type_name("TEXT")->required();
  command.add_option("--max-new-tokens", *max_new, "tokens to generate (fewer when the model ends the text)")
      ->type_name("N")
      ->required();
  command
      .add_option("--tokenizer", args->tokenizer,
                  "byte, a SentencePiece .model or a tokenizer.json (default: MODEL's tokenizer.json or "
                  "tokenizer.model, else byte)")
      ->type_name("T");
  command.add_option("--temperature", *temperature, "0: greedy (top-k and top-p unused)")
      ->type_name("T")
      ->capture_default_str();
  command.add_option("--top-k", *top_k, "sample among the K most likely tokens (0: all)")
      ->type_name("K")
      ->capture_default_str();
  command.add_option("--top-p", *top_p, "then among the most likely whose probability reaches P (1: all)")
      ->type_name("P")
      ->capture_default_str();
  command.add_option("--seed", *seed, "the sampler's seed: the same seed, the same text")
      ->type_name("S")
      ->capture_default_str();
  command.add_flag("--ids", args->ids, "end with a line of the generated ids (the continuation only) as a JSON list");
  add_overrides(command, args->overrides);
  command.footer(
      "Under mpirun or torchrun, --set parallel.tp=WORLD splits the model over the ranks; the output is\n"
      "the same as one process's. Generation stops after N tokens or at the tokenizer's end-of-sequence\n"
      "token (kept in --ids, not printed).");
  return [args, max_new, temperature, top_k, top_p, seed] {
    args->max_new_tokens = parse_integer("--max-new-tokens", *max_new, 1);
    args->temperature = parse_number("--temperature", *temperature);
    args->top_k = parse_integer("--top-k", *top_k, 0);
    args->top_p = parse_number("--top-p", *top_p);
    args->seed = static_cast<uint64_t>(parse_integer("--seed", *seed, 0));
    return generate(*args);
  };
}

// The command line as CLI11 reports a problem with it, as one line for InputError:
// "loom train: the following argument was not expected: --bogus (see 'loom train --help')".
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& error) {
  std::string command = app.get_name();
  for (const CLI::App* at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    command += " " + at->get_name();
  }
  // CLI11 starts sentences with a capital ("The following argument..."), but not names ("CONFIG.yaml is required").
  std::string what = error.what();
  const std::string first_word = what.substr(0, what.find(' '));
  if (!what.empty() &&
      std::all_of(first_word.begin() + 1, first_word.end(), [](unsigned char c) { return std::islower(c); })) {
    what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
  }
  return (command == app.get_name() ? "" : command + ": ") + what + " (see '" + command + " --help')";
}

// Help that reads like the rest of loom's output; subcommands inherit the formatter.
void format_help(CLI::App& app) {
  app.get_formatter()->label("Usage", "usage");
  app.get_formatter()->column_width(34);
}

// Parses ARGV into APP. Help and --version print and give exit code 0; any other problem is an InputError.
// Returns -1 when the command line is good and the command should run.
int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& done) {
    return app.exit(done);
  } catch (const CLI::ParseError& error) {
    throw InputError(parse_error_message(app, error));
  }
  return -1;
}

// Before a command loom takes only --help and --version: says so, or names the closest command,
// rather than CLI11's "a subcommand is required".
void check_command(const CLI::App& loom, const std::string& command) {
  const auto& options = loom.get_options();
  if (command.rfind('-', 0) == 0) {
    if (std::none_of(options.begin(), options.end(), [&](const CLI::Option* o) { return o->check_name(command); })) {
      throw InputError("unknown flag '" + command + "': flags follow the command, as in 'loom train CONFIG.yaml " +
                       command + "' (see 'loom --help')");
    }
    return;
  }
  std::vector<std::string> names;
  for (const CLI::App* sub : loom.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  if (std::find(names.begin(), names.end(), command) == names.end()) {
    throw InputError("unknown command '" + command + "'; did you mean '" + closest_name(command, names) +
                     "'? (see 'loom --help')");
  }
}

int dispatch(int argc, char** argv) {
  CLI::App loom("loom: hybrid-parallel training of transformer models on LibTorch", "loom");
  format_help(loom);
  loom.footer(
      std::string("'loom COMMAND --help' shows a command's flags; 'loom train --help' also every config key.\n") +
      kExitCodes);
  loom.set_version_flag("--version", std::string("loom ") + LOOM_VERSION + "\n" + build_description());
  loom.require_subcommand(1);
  const std::vector<std::pair<std::string, Command>> commands = {
      {"train", add_train(loom)},       {"topology", add_topology(loom)}, {"schedule", add_schedule(loom)},
      {"plan", add_plan(loom)},         {"export", add_export(loom)},     {"prepare", add_prepare(loom)},
      {"generate", add_generate(loom)}, {"verify", add_verify(loom)},     {"diagnose", add_diagnose(loom)},
  };
  if (argc < 2) {
    std::cout << loom.help();
    return 2;
  }
  check_command(loom, argv[1]);
  if (int code = parse(loom, argc, argv); code >= 0) return code;
  for (const auto& [name, run] : commands) {
    if (!loom.got_subcommand(name)) continue;
    // train holds a stop signal until its input is checked (launch/train_command.cpp), and so does
    // verify, whose layout run is a train: under srun -K1 its bad config exits 2 on every rank too.
    if (name != "train" && name != "verify") release_held_stop_signals();
    return run();
  }
  throw InputError("no command given (see 'loom --help')");
}

}  // namespace

int run_cli(int argc, char** argv) {
  return exit_on_error([&] { return dispatch(argc, argv); });
}

int train_main(int argc, char** argv, const models::ModelFactory& make_model) {
  return train_main(argc, argv, models::whole_model_only(make_model));
}

int train_main(int argc, char** argv, const models::PipelineModelFactory& make_model) {
  return exit_on_error([&] {
    const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "train";
    // PROGRAM verify CONFIG ...: loom verify of this program's model, whose reference run is
    // PROGRAM train CONFIG ... (the same as PROGRAM CONFIG ...).
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "verify") {
      CLI::App app(std::string("this program's model: ") + kVerifyHelp, program + " verify");
      format_help(app);
      auto parsed = add_verify_flags(app);
      if (int code = parse(app, argc - 1, argv + 1); code >= 0) return code;
      return verify(parsed(), make_model);
    }
    const int skipped = command == "train" ? 1 : 0;
    CLI::App app("train a model with loom ('" + program + " verify CONFIG.yaml' compares a layout with one process)",
                 program);
    format_help(app);
    auto parsed = add_train_flags(app);
    if (int code = parse(app, argc - skipped, argv + skipped); code >= 0) return code;
    return train(parsed(), make_model);
  });
}

}  // namespace loom::launch
