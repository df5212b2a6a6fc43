// The loom subcommands. Each returns the process exit code or throws
// (InputError: exit 2; anything else: exit 1); cli.cpp turns throws into one message.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/language_model.h"

namespace loom::launch {

// A deliberate failure on one rank, for tests of how the others end:
// "RANK:STEP:kill" dies by SIGKILL, "RANK:STEP:hang" stops answering,
// "RANK:STEP:kill_in_save" dies by SIGKILL halfway through the checkpoint saved after STEP,
// "RANK:STEP:fail_save" fails to write its files of it, "RANK:STEP:slow_save:MS" takes MS longer to,
// "0:STEP:slow_resume:MS" takes MS longer to check the checkpoints of a resume (rank 0 checks them;
// STEP is any step of the run),
// "RANK:STEP:slow" takes 100 ms longer per step from STEP on.
// "RANK:STEP:scale:GROUP:EPS" (kind "scale") multiplies by 1 + EPS the result of one collective of GROUP
// on the rank at STEP: its first all-reduce or reduce-scatter for dp (a gradient bucket), its first
// receive for pp (a pipeline send), its first call of any kind for tp, cp and ep.
struct FaultInjection {
  int rank = -1;
  int64_t step = -1;
  std::string kind;
  std::string group;     // scale, delay: the parallel dimension
  double epsilon = 0.0;  // scale: the result times 1 + epsilon
  // For `loom diagnose`'s tests, each from STEP on, on the rank: "delay:GROUP:MS" sleeps MS before
  // each collective of GROUP; "slow-data:MS" before each batch read; "straggler:RANK:MS" once per step.
  double milliseconds = 0.0;
};

// "RANK:STEP:KIND" as --inject-fault takes it; InputError naming what is wrong.
FaultInjection parse_fault(const std::string& text);

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string run_dir;
  FaultInjection fault;
  std::string resume;              // "auto", a checkpoint path, or empty
  bool overwrite_run_dir = false;  // a fresh run may replace the records of another run in run_dir
  bool allow_data_change = false;  // a resume may go on over other data than its checkpoint's (launch/data_record.h)
  // The model's training FLOPs per token, for the MFU line (models/gpt_flops.h); empty: not reported.
  std::function<double(const Config&)> flops_per_token;
  // For `loom verify`: where the first step's gradients and updated weights go (launch/step_dump.h).
  std::string dump_first_step;
};

int train(const TrainArgs& args, const models::PipelineModelFactory& make_model);

// loom verify: the config's layout and a one-process reference trained from the same weights and
// data for STEPS steps, their losses and first step's gradients and weights compared
// (launch/verify.h). Exit 0 equal, 4 not.
struct VerifyArgs {
  TrainArgs train;    // the layout's run: config, overrides, fault
  int64_t steps = 5;  // --steps
  double rtol = 0.0;  // --rtol; 0: 1e-5 in fp32, 2e-2 in bf16
  std::string self;   // this program, which trains the reference in a process of its own
};
int verify(const VerifyArgs& args, const models::PipelineModelFactory& make_model);

// loom diagnose RUN_DIR [--cluster FILE]: where the run's step time went and the ladder's verdict,
// from its diagnosis.json (launch/step_split.h); with CLUSTER_PATH, beside `loom plan`'s prediction
// for the run's layout on that cluster (launch/diagnose_plan.h). Exit 0.
int diagnose(const std::string& run_dir, const std::string& cluster_path = "");

struct TopologyArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  int64_t world = 0;
};

int topology(const TopologyArgs& args);
// loom schedule: the simulated pipeline timeline and bubble of a layout (WORLD 0: tp * pp * dp of the config).
int schedule(const TopologyArgs& args);

struct PrepareArgs {
  std::vector<std::string> inputs;  // plain text, or JSON lines (*.jsonl, *.json)
  std::string output_prefix;
  std::string tokenizer = "byte";  // see load_tokenizer (core/tokenizer.h)
  bool split_paragraphs = false;   // a document per blank-line separated paragraph
  std::string json_key = "text";   // the text of a JSON line
  bool add_bos = false;
  bool append_eod = false;  // the tokenizer's EOS after each document
  int workers = 1;          // tokenizing threads; the output does not depend on them
};

int prepare(const PrepareArgs& args);

struct ExportArgs {
  std::string checkpoint;
  std::string format = "hf";
  std::string output;                  // a directory; for hf-gpt2 also FILE.safetensors
  std::string max_shard_size = "5GB";  // transformers' default
};

int export_checkpoint(const ExportArgs& args);

struct GenerateArgs {
  std::string model;  // a loom checkpoint (step_N or checkpoint.dir) or a Hugging Face model directory
  std::string prompt;
  int64_t max_new_tokens = 0;
  std::string tokenizer;  // a tokenizer spec (core/tokenizer.h); empty: MODEL's own, else byte
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  bool ids = false;  // the generated ids as a JSON list on the last line
  std::vector<std::string> overrides;
};

// loom generate MODEL --prompt TEXT --max-new-tokens N: the continuation on stdout as it comes.
int generate(const GenerateArgs& args);

struct PlanArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string cluster_path;
  int64_t world = 0;  // 0: the whole cluster
  int64_t top = 5;
};

// loom plan CONFIG --cluster FILE: layouts ranked by the cost model.
int plan(const PlanArgs& args);

// loom plan --run DIR: the cost model's predicted traffic beside a finished run's counters.
int plan_run(const std::string& run_dir);

// Parses ARGV and runs the subcommand; never throws.
int run_cli(int argc, char** argv);

// The entry point of a user's own training program: ARGV is
// "[train] CONFIG.yaml [--set section.key=value]... [--run-dir DIR]", as for `loom train`, or
// "verify CONFIG.yaml ...", as for `loom verify` (its reference run is "train ..." of the same
// program), and MAKE_MODEL builds the model. Returns the exit code; never throws.
int train_main(int argc, char** argv, const models::ModelFactory& make_model);
// The same for a model that can be split into pipeline stages.
int train_main(int argc, char** argv, const models::PipelineModelFactory& make_model);

}  // namespace loom::launch
