#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "launch/commands.h"
#include "models/gpt.h"
#include "models/gpt_flops.h"

namespace loom::launch {
namespace {

constexpr const char* kUsage = R"(usage:
  loom train CONFIG.yaml [--set section.key=value]... [--run-dir DIR] [--resume auto|CHECKPOINT]
  loom topology CONFIG.yaml --world N [--set section.key=value]...
  loom schedule CONFIG.yaml [--world N] [--set section.key=value]...
  loom export CHECKPOINT --format hf-gpt2 --output FILE.safetensors
  loom plan CONFIG.yaml --cluster CLUSTER.yaml [--world N] [--top K] [--set section.key=value]...
  loom plan CONFIG.yaml --world N             (model-state bytes per rank for each ZeRO stage)
  loom plan --run RUN_DIR
  loom prepare --input FILE... --output PREFIX [--tokenizer byte] [--append-eod]

exit codes: 0 success, 2 bad input (config, arguments, data), 1 anything else
)";

class ArgReader {
 public:
  ArgReader(int argc, char** argv, int first) : args_(argv + first, argv + argc) {}
  bool done() const { return pos_ >= args_.size(); }
  const std::string& peek() const { return args_[pos_]; }
  std::string next() { return args_[pos_++]; }
  std::string value_of(const std::string& flag) {
    if (done() || peek().rfind("--", 0) == 0) throw InputError(flag + " needs a value");
    return next();
  }

 private:
  std::vector<std::string> args_;
  size_t pos_ = 0;
};

int64_t parse_integer(const std::string& flag, const std::string& text, int64_t min) {
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < min) {
    throw InputError(flag + " expects an integer of at least " + std::to_string(min) + ", got '" + text + "'");
  }
  return value;
}

FaultInjection parse_fault(const std::string& text) {
  FaultInjection fault;
  auto first = text.find(':'), second = text.rfind(':');
  if (first == std::string::npos || first == second) {
    throw InputError("--inject-fault expects RANK:STEP:KIND, got '" + text + "'");
  }
  fault.rank = static_cast<int>(parse_integer("--inject-fault RANK", text.substr(0, first), 0));
  fault.step = parse_integer("--inject-fault STEP", text.substr(first + 1, second - first - 1), 1);
  fault.kind = text.substr(second + 1);
  if (fault.kind != "kill" && fault.kind != "hang" && fault.kind != "kill_in_save" && fault.kind != "overflow") {
    throw InputError("--inject-fault KIND must be kill, hang, kill_in_save or overflow");
  }
  return fault;
}

TrainArgs parse_train_args(ArgReader& args) {
  TrainArgs train_args;
  while (!args.done()) {
    std::string a = args.next();
    if (a == "--set") {
      train_args.overrides.push_back(args.value_of(a));
    } else if (a == "--run-dir") {
      train_args.run_dir = args.value_of(a);
    } else if (a == "--resume") {
      train_args.resume = args.value_of(a);
    } else if (a == "--inject-fault") {
      train_args.fault = parse_fault(args.value_of(a));
    } else if (a.rfind("--", 0) != 0 && train_args.config_path.empty()) {
      train_args.config_path = a;
    } else {
      throw InputError("loom train: unexpected argument '" + a + "'\n" + kUsage);
    }
  }
  if (train_args.config_path.empty()) throw InputError(std::string("loom train needs CONFIG.yaml\n") + kUsage);
  return train_args;
}

int dispatch(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  ArgReader args(argc, argv, 2);
  if (command == "train") {
    TrainArgs train_args = parse_train_args(args);
    train_args.flops_per_token = models::gpt_flops_per_token;
    return train(train_args, models::make_gpt_piece);
  }
  if (command == "topology" || command == "schedule") {
    TopologyArgs topo;
    while (!args.done()) {
      std::string a = args.next();
      if (a == "--set") {
        topo.overrides.push_back(args.value_of(a));
      } else if (a == "--world") {
        topo.world = parse_integer(a, args.value_of(a), 1);
      } else if (a.rfind("--", 0) != 0 && topo.config_path.empty()) {
        topo.config_path = a;
      } else {
        throw InputError("loom " + command + ": unexpected argument '" + a + "'\n" + kUsage);
      }
    }
    if (command == "schedule") {
      if (topo.config_path.empty()) throw InputError(std::string("loom schedule needs CONFIG.yaml\n") + kUsage);
      return schedule(topo);
    }
    if (topo.config_path.empty() || topo.world == 0) {
      throw InputError(std::string("loom topology needs CONFIG.yaml and --world N\n") + kUsage);
    }
    return topology(topo);
  }
  if (command == "plan") {
    if (argc == 4 && std::string(argv[2]) == "--run") return plan_run(argv[3]);
    PlanArgs plan_args;
    while (!args.done()) {
      std::string a = args.next();
      if (a == "--set") {
        plan_args.overrides.push_back(args.value_of(a));
      } else if (a == "--cluster") {
        plan_args.cluster_path = args.value_of(a);
      } else if (a == "--world") {
        plan_args.world = parse_integer(a, args.value_of(a), 1);
      } else if (a == "--top") {
        plan_args.top = parse_integer(a, args.value_of(a), 1);
      } else if (a.rfind("--", 0) != 0 && plan_args.config_path.empty()) {
        plan_args.config_path = a;
      } else {
        throw InputError("loom plan: unexpected argument '" + a + "'\n" + kUsage);
      }
    }
    if (plan_args.config_path.empty()) throw InputError(std::string("loom plan needs CONFIG.yaml or --run DIR\n") + kUsage);
    return plan(plan_args);
  }
  if (command == "export") {
    ExportArgs exp;
    while (!args.done()) {
      std::string a = args.next();
      if (a == "--format") {
        exp.format = args.value_of(a);
      } else if (a == "--output") {
        exp.output = args.value_of(a);
      } else if (a.rfind("--", 0) != 0 && exp.checkpoint.empty()) {
        exp.checkpoint = a;
      } else {
        throw InputError("loom export: unexpected argument '" + a + "'\n" + kUsage);
      }
    }
    if (exp.checkpoint.empty() || exp.output.empty()) {
      throw InputError(std::string("loom export needs CHECKPOINT and --output FILE\n") + kUsage);
    }
    return export_checkpoint(exp);
  }
  if (command == "prepare") {
    PrepareArgs prep;
    while (!args.done()) {
      std::string a = args.next();
      if (a == "--input") {
        prep.inputs.push_back(args.value_of(a));
        while (!args.done() && args.peek().rfind("--", 0) != 0) prep.inputs.push_back(args.next());
      } else if (a == "--output") {
        prep.output_prefix = args.value_of(a);
      } else if (a == "--tokenizer") {
        prep.tokenizer = args.value_of(a);
      } else if (a == "--append-eod") {
        prep.append_eod = true;
      } else {
        throw InputError("loom prepare: unexpected argument '" + a + "'\n" + kUsage);
      }
    }
    if (prep.inputs.empty() || prep.output_prefix.empty()) {
      throw InputError(std::string("loom prepare needs --input FILE... and --output PREFIX\n") + kUsage);
    }
    return prepare(prep);
  }
  throw InputError("unknown command '" + command + "'\n" + kUsage);
}

// Leaves without running destructors: after a failed collective, communicator
// threads may still wait on a dead peer, and joining them would hang the exit.
[[noreturn]] void die(int code, const std::string& message) {
  std::cout.flush();
  std::fprintf(stderr, "loom: error: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

template <typename Body>
int guarded(Body&& body) {
  try {
    return body();
  } catch (const InputError& e) {
    die(2, e.what());
  } catch (const c10::Error& e) {
    die(1, e.what_without_backtrace());
  } catch (const std::exception& e) {
    die(1, e.what());
  }
}

}  // namespace

int run_cli(int argc, char** argv) {
  return guarded([&] { return dispatch(argc, argv); });
}

int train_main(int argc, char** argv, const models::ModelFactory& make_model) {
  return train_main(argc, argv, models::whole_model_only(make_model));
}

int train_main(int argc, char** argv, const models::PipelineModelFactory& make_model) {
  return guarded([&] {
    ArgReader args(argc, argv, 1);
    return train(parse_train_args(args), make_model);
  });
}

}  // namespace loom::launch
