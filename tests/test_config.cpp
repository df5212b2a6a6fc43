#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/config_aliases.h"
#include "core/config_fields.h"
#include "core/cuda_backend.h"
#include "core/device.h"
#include "core/errors.h"
#include "launch/supported_combinations.h"
#include "test_helpers.h"

using loom::Config;
using loom::InputError;

namespace {

using loom::test::write_temp_yaml;

Config resolved(const std::vector<std::string>& overrides, int64_t world) {
  Config c = loom::load_config(
      write_temp_yaml("model:\n  num_layers: 4\ntrain:\n  global_batch_size: 16\n  micro_batch_size: 1\n"), overrides);
  loom::resolve_and_validate(c, world);
  return c;
}

// The error message of resolving OVERRIDES at WORLD; fails the test if there is none.
std::string error_of(const std::vector<std::string>& overrides, int64_t world) {
  try {
    resolved(overrides, world);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("expected an InputError");
  return "";
}

// The message of loading YAML with OVERRIDES; "no error" if there is none.
std::string load_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    loom::load_config(write_temp_yaml(yaml), overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("config reads YAML sections and applies overrides in order", "[config]") {
  auto path = write_temp_yaml("model:\n  hidden_size: 96\n  num_heads: 3\ntrain:\n  lr: 0.5\n  min_lr: 0.1\n");
  Config c = loom::load_config(path, {"train.lr=0.25", "train.lr=0.3", "parallel.sequence_parallel=false"});
  CHECK(c.model.hidden_size == 96);
  CHECK(c.model.num_heads == 3);
  CHECK(c.train.lr == Approx(0.3));
  CHECK(c.train.min_lr == Approx(0.1));
  CHECK(c.model.num_layers == 2);  // default
  CHECK(c.ffn_size() == 4 * 96);
}

TEST_CASE("unknown keys and sections are errors that suggest the closest name", "[config]") {
  auto check = [](const std::string& yaml, const std::string& expected) {
    try {
      loom::load_config(write_temp_yaml(yaml));
      FAIL("expected an InputError for " << yaml);
    } catch (const InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains(expected));
    }
  };
  check("model:\n  hiden_size: 3\n", "did you mean 'model.hidden_size'");
  check("modle:\n  hidden_size: 3\n", "did you mean 'model'");
  check("train:\n  global_batch: 3\n", "did you mean 'train.global_batch_size'");
  check("model:\n  hidden_size: big\n", "'model.hidden_size' expects an integer, got 'big'");
  check("model:\n  bias: maybe\n", "'model.bias' expects a boolean (true or false");
  check("train:\n  lr: fast\n", "'train.lr' expects a finite number, got 'fast'");
  check("model:\n  dropout: [1, 2]\n", "'model.dropout' must be a single value");
  check("model: 3\n", "section 'model' must be a mapping");
  check("model:\n  hidden_size: 3\n   bad: [\n", "not valid YAML");
  CHECK_THROWS_WITH(loom::apply_override(*std::make_unique<Config>(), "train.lr"),
                    Catch::Contains("section.key=value"));
  CHECK_THROWS_WITH(loom::apply_override(*std::make_unique<Config>(), "parallel.tpp=2"),
                    Catch::Contains("did you mean 'parallel.tp'"));
  CHECK_THROWS_WITH(loom::load_config("/nonexistent/loom.yaml"), Catch::Contains("/nonexistent/loom.yaml"));
  // Booleans as PyYAML reads YAML 1.1 (a Megatron-LM or Hugging Face config's on/off, TRUE), and 1/0.
  auto config = std::make_unique<Config>();
  for (const char* yes : {"true", "True", "TRUE", "yes", "Yes", "on", "ON", "1"}) {
    config->model.bias = false;
    loom::apply_override(*config, std::string("model.bias=") + yes);
    CHECK(config->model.bias);
  }
  for (const char* no : {"false", "FALSE", "no", "NO", "off", "Off", "0"}) {
    config->model.bias = true;
    loom::apply_override(*config, std::string("model.bias=") + no);
    CHECK_FALSE(config->model.bias);
  }
  CHECK_THROWS_WITH(loom::apply_override(*config, "model.bias=y"), Catch::Contains("expects a boolean"));
}

TEST_CASE("every config key has a meaning, and the help lists it with its type and default", "[config]") {
  const std::string help = loom::config_keys_help();
  const Config defaults;
  for (const auto& field : loom::config_fields()) {
    INFO(field.name());
    CHECK_FALSE(field.help.empty());
    const auto at = help.find("\n  " + field.name() + " ");
    REQUIRE(at != std::string::npos);
    const std::string line = help.substr(at + 1, help.find('\n', at + 1) - at - 1);
    const std::string value = field.print(defaults);
    CHECK_THAT(line, Catch::Contains(" " + field.type + " ") && Catch::Contains(value.empty() ? "\"\"" : value) &&
                         Catch::EndsWith(field.help));
  }
  CHECK_THAT(help, Catch::Contains("train.steps") && Catch::Contains("100") && Catch::Contains("optimizer steps"));
}

TEST_CASE("Megatron-LM's names, as --set keys or YAML keys, suggest loom's", "[config]") {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"train_iters", "train.steps"},
      {"tensor_model_parallel_size", "parallel.tp"},
      {"pipeline_model_parallel_size", "parallel.pp"},
      {"lr_warmup_iters", "train.warmup_steps"},
      {"clip_grad", "train.grad_clip"},
      {"micro_batch_size", "train.micro_batch_size"},
      {"global_batch_size", "train.global_batch_size"},
      {"seq_length", "model.seq_len"},
      {"num_attention_heads", "model.num_heads"},
      {"hidden_size", "model.hidden_size"},
      {"ffn_hidden_size", "model.ffn_hidden_size"},
      {"num_layers", "model.num_layers"},
      {"weight_decay", "train.weight_decay"},
      {"adam_beta1", "train.adam_beta1"},
      {"adam_beta2", "train.adam_beta2"},
      {"adam_eps", "train.adam_eps"},
      {"min_lr", "train.min_lr"},
      {"seed", "train.seed"},
      {"save", "checkpoint.dir"},
      {"save_interval", "checkpoint.interval"},
      {"log_interval", "log.interval"},
      {"bf16", "train.precision"},
      {"fp16", "train.precision"},
      {"sequence_parallel", "parallel.sequence_parallel"},
      {"num_experts", "model.moe.num_experts"},
      {"expert_model_parallel_size", "parallel.ep"},
      {"data_path", "data.path"},
      {"eod_mask_loss", "data.eod_mask_loss"},
      {"recompute_granularity", "train.recompute"},
      {"use_distributed_optimizer", "parallel.zero_stage"},
      {"virtual_pipeline_model_parallel_size", "parallel.virtual_stages"},
  };
  for (const auto& [megatron, key] : expected) {
    INFO(megatron);
    const std::string hint = "did you mean '" + key + "'";
    CHECK_THAT(load_error("train: {}\n", {megatron + "=1"}),
               Catch::Contains("unknown key '" + megatron + "'") && Catch::Contains(hint));
    CHECK_THAT(load_error(megatron + ": 1\n"), Catch::Contains(hint));  // top level, where a section would be
    CHECK_THAT(load_error("log:\n  " + megatron + ": 1\n"), Catch::Contains(hint));
  }
  CHECK_THAT(load_error("train: {}\n", {"--train-iters=5"}), Catch::Contains("did you mean 'train.steps'"));
  CHECK_THAT(load_error("train: {}\n", {"bf16=true"}), Catch::Contains("set it to bf16"));
  CHECK_THAT(load_error("train: {}\n", {"context_parallel_size=2"}), Catch::Contains("did you mean 'parallel.cp'"));
  CHECK_THAT(load_error("train: {}\n", {"--reset-attention-mask=true"}),
             Catch::Contains("--reset-attention-mask: not built"));
  CHECK_THAT(load_error("parallel:\n  expert_tensor_parallel_size: 2\n"),
             Catch::Contains("did you mean 'parallel.expert_tp'"));
  // Every alias points at a key that exists.
  std::vector<std::string> names;
  for (const auto& field : loom::config_fields()) names.push_back(field.name());
  for (const auto& alias : loom::megatron_aliases()) {
    INFO(alias.megatron);
    if (*alias.loom != '\0') CHECK(std::find(names.begin(), names.end(), alias.loom) != names.end());
    CHECK_FALSE(loom::megatron_hint(alias.megatron).empty());
  }
  // Names that are no one's alias still get the closest key.
  CHECK_THAT(load_error("train: {}\n", {"train.step=5"}), Catch::Contains("did you mean 'train.steps'?"));
}

TEST_CASE("dp is derived from the world and checked when given", "[config]") {
  CHECK(resolved({}, 4).parallel.dp == 4);
  CHECK(resolved({"parallel.tp=2"}, 8).parallel.dp == 4);
  CHECK(resolved({"parallel.tp=2", "parallel.pp=2", "parallel.dp=2"}, 8).parallel.dp == 2);
  CHECK_THAT(error_of({"parallel.dp=3"}, 4), Catch::Contains("parallel.dp") && Catch::Contains("set it to 4"));
  CHECK_THAT(error_of({"parallel.tp=4"}, 6), Catch::Contains("not divisible by tp * cp * pp = 4"));
}

TEST_CASE("every validation rule names its key", "[config]") {
  struct Case {
    std::vector<std::string> overrides;
    int64_t world;
    std::string key;
  };
  const std::vector<Case> cases = {
      {{"model.num_heads=3"}, 1, "model.hidden_size"},
      {{"parallel.tp=3", "model.num_heads=4", "model.hidden_size=48"}, 3, "model.num_heads"},
      {{"parallel.tp=2", "model.ffn_hidden_size=11"}, 2, "model.ffn_hidden_size"},
      {{"parallel.sequence_parallel=true"}, 1, "parallel.sequence_parallel"},
      {{"parallel.tp=2", "parallel.sequence_parallel=true", "model.seq_len=63"}, 2, "model.seq_len"},
      {{"parallel.pp=3"}, 3, "model.num_layers"},
      {{"parallel.pp=2", "parallel.virtual_stages=4"}, 2, "model.num_layers"},
      {{"parallel.ep=3"}, 4, "parallel.ep"},
      {{"parallel.tp=2", "parallel.expert_tp=2"}, 2, "parallel.expert_tp"},
      {{"parallel.tp=2", "parallel.expert_tp=4", "model.moe.num_experts=4"}, 4, "parallel.expert_tp"},
      {{"parallel.tp=2", "parallel.expert_tp=2", "model.moe.num_experts=4", "model.moe.moe_intermediate_size=9"},
       2,
       "parallel.expert_tp"},
      {{"parallel.zero_stage=4"}, 1, "parallel.zero_stage"},
      {{"parallel.backend=mpi"}, 1, "parallel.backend"},
      {{"parallel.timeout_s=0"}, 1, "parallel.timeout_s"},
      {{"train.global_batch_size=12", "train.micro_batch_size=4"}, 2, "train.global_batch_size"},
      {{"train.micro_batch_size=0"}, 1, "train.micro_batch_size"},
      {{"train.steps=0"}, 1, "train.steps"},
      {{"train.lr=0"}, 1, "train.lr"},
      {{"train.min_lr=1"}, 1, "train.min_lr"},
      {{"train.warmup_steps=1000"}, 1, "train.warmup_steps"},
      {{"train.precision=fp8"}, 1, "train.precision"},
      {{"train.device=tpu"}, 1, "train.device"},
      {{"train.adam_beta2=1"}, 1, "train.adam_beta2"},
      {{"model.dropout=1"}, 1, "model.dropout"},
      {{"model.vocab_size=1"}, 1, "model.vocab_size"},
      {{"data.order=random"}, 1, "data.order"},
      {{"log.interval=0"}, 1, "log.interval"},
      {{"checkpoint.keep=0"}, 1, "checkpoint.keep"},
      {{"parallel.schedule=zb"}, 1, "parallel.schedule"},
      {{"parallel.pp=2", "parallel.schedule=interleaved"}, 2, "parallel.virtual_stages"},
      {{"parallel.pp=2", "parallel.virtual_stages=2"}, 2, "parallel.schedule"},
      {{"parallel.virtual_stages=2", "parallel.schedule=interleaved"}, 1, "parallel.pp"},
      {{"parallel.schedule=zb-h1"}, 1, "parallel.pp"},
      {{"parallel.pp=2", "parallel.virtual_stages=2", "parallel.schedule=zb-h1"}, 2, "parallel.schedule"},
      {{"parallel.pp=4", "train.global_batch_size=4", "train.micro_batch_size=2"}, 4, "train.global_batch_size"},
      {{"parallel.pp=2", "parallel.virtual_stages=2", "parallel.schedule=interleaved", "train.global_batch_size=3"},
       2,
       "train.global_batch_size"},
  };
  for (const auto& c : cases) {
    INFO("overrides[0] = " << c.overrides[0]);
    CHECK_THAT(error_of(c.overrides, c.world), Catch::Contains("'" + c.key + "'"));
  }
  CHECK_THAT(error_of({"train.global_batch_size=12", "train.micro_batch_size=4"}, 2),
             Catch::Contains("use a multiple of 8"));
  // The rank grid's order and sizes are checked here, before any grid is built.
  CHECK_THAT(error_of({"parallel.order=tp-xx-dp-pp"}, 1), Catch::Contains("parallel.order") && Catch::Contains("'xx'"));
  CHECK_THAT(error_of({"parallel.order=tp-dp-dp-pp"}, 1),
             Catch::Contains("parallel.order") && Catch::Contains("repeats"));
  CHECK_THAT(error_of({"parallel.order=tp-dp"}, 1), Catch::Contains("parallel.order") && Catch::Contains("lacks"));
  CHECK_THAT(error_of({"parallel.ep=2"}, 3),
             Catch::Contains("'parallel.ep'") && Catch::Contains("does not divide dp = 3"));
  // Pipeline errors say what would work.
  CHECK_THAT(error_of({"parallel.pp=3"}, 3),
             Catch::Contains("3 or 6 layers would split") && Catch::Contains("pp * virtual_stages of 1, 2 or 4"));
  CHECK_THAT(error_of({"parallel.pp=4", "train.global_batch_size=4", "train.micro_batch_size=2"}, 4),
             Catch::Contains("2 micro-batches per step") && Catch::Contains("use at least 8"));
  CHECK_THAT(error_of({"parallel.pp=2", "parallel.virtual_stages=2", "parallel.schedule=interleaved",
                       "train.global_batch_size=3"},
                      2),
             Catch::Contains("3 micro-batches per step; the interleaved schedule needs a multiple of parallel.pp = 2"));
}

TEST_CASE("every count key is bounded, so that no product of them overflows before the memory check", "[config]") {
  const std::string huge = "1000000000000000000";  // 1e18
  for (const char* key : {"model.hidden_size", "model.ffn_hidden_size", "model.num_layers", "model.vocab_size",
                          "model.seq_len", "model.moe.num_experts", "train.global_batch_size", "train.steps",
                          "eval.steps", "checkpoint.keep", "log.interval"}) {
    INFO(key);
    CHECK_THAT(error_of({std::string(key) + "=" + huge}, 1),
               Catch::Contains(std::string("'") + key + "'") && Catch::Contains("more than loom accepts"));
  }
  CHECK_THAT(error_of({"parallel.tp=4611686018427387904"}, 2),
             Catch::Contains("'parallel.tp'") && Catch::Contains("more than the 2 ranks of this job"));
  // Today's largest models are well inside.
  CHECK_NOTHROW(resolved({"model.hidden_size=16384", "model.num_heads=128", "model.vocab_size=262144",
                          "model.seq_len=131072", "model.ffn_hidden_size=53248"},
                         1));
}

TEST_CASE("model.arch sets the defaults of the keys a config leaves unset; set keys win", "[config]") {
  const Config gpt2 = resolved({}, 1);
  CHECK(gpt2.model.norm == loom::NormKind::layernorm);
  CHECK(gpt2.model.activation == loom::Activation::gelu);
  CHECK(gpt2.model.position == loom::PositionKind::learned);
  CHECK((gpt2.model.bias && gpt2.model.qkv_bias && gpt2.model.tie_embeddings));
  CHECK(gpt2.ffn_size() == 4 * 64);

  const Config llama = resolved({"model.arch=llama"}, 1);
  CHECK(llama.model.norm == loom::NormKind::rmsnorm);
  CHECK(llama.model.activation == loom::Activation::swiglu);
  CHECK(llama.model.position == loom::PositionKind::rope);
  CHECK((!llama.model.bias && !llama.model.qkv_bias && !llama.model.tie_embeddings));
  CHECK(llama.ffn_size() == 256);  // 8 x 64 / 3 = 170, rounded up to a multiple of 256
  CHECK(llama.model.kv_heads() == llama.model.num_heads);

  // Explicit keys win whatever their order against model.arch; qkv_bias follows bias unless set.
  const Config mixed =
      resolved({"model.tie_embeddings=true", "model.arch=llama", "model.norm=layernorm", "model.bias=true"}, 1);
  CHECK(mixed.model.tie_embeddings);
  CHECK(mixed.model.norm == loom::NormKind::layernorm);
  CHECK((mixed.model.bias && mixed.model.qkv_bias));
  CHECK(mixed.model.activation == loom::Activation::swiglu);
  const Config qwen_like = resolved({"model.arch=llama", "model.qkv_bias=true"}, 1);
  CHECK((!qwen_like.model.bias && qwen_like.model.qkv_bias));
  // The same from a file: the YAML's keys count as set.
  Config from_file = loom::load_config(write_temp_yaml("model:\n  arch: llama\n  position: learned\n"));
  CHECK(from_file.model.position == loom::PositionKind::learned);
  CHECK(from_file.model.norm == loom::NormKind::rmsnorm);
}

TEST_CASE("grouped-query attention follows Megatron-LM's tp rule; RoPE needs an even head dimension", "[config]") {
  // 2 kv heads over tp 4: each shared by 2 ranks. 4 kv heads over tp 8 (8 heads of 8).
  CHECK(resolved({"model.num_kv_heads=2", "parallel.tp=4"}, 4).model.kv_heads() == 2);
  CHECK(resolved({"model.num_heads=8", "model.num_kv_heads=4", "parallel.tp=8"}, 8).model.kv_heads() == 4);
  CHECK(resolved({"model.num_kv_heads=2", "parallel.tp=2"}, 2).model.kv_heads() == 2);
  // 3 kv heads over tp 2: neither whole kv heads per rank nor an equal share of one.
  const auto three_over_two =
      error_of({"model.hidden_size=96", "model.num_heads=6", "model.num_kv_heads=3", "parallel.tp=2"}, 2);
  CHECK_THAT(three_over_two, Catch::Contains("'model.num_kv_heads'") && Catch::Contains("parallel.tp = 2"));
  CHECK_THAT(error_of({"model.num_kv_heads=3"}, 1),
             Catch::Contains("'model.num_kv_heads'") && Catch::Contains("do not divide model.num_heads = 4"));
  // RoPE rotates pairs: head dimension 60 / 4 = 15 is refused, 64 / 4 = 16 is fine.
  CHECK_THAT(error_of({"model.arch=llama", "model.hidden_size=60"}, 1),
             Catch::Contains("'model.position'") && Catch::Contains("= 15 must be even"));
  CHECK(resolved({"model.arch=llama"}, 1).model.head_dim() == 16);
  CHECK_THAT(error_of({"model.rope_scaling.type=llama3"}, 1), Catch::Contains("'model.rope_scaling.type'"));
}

TEST_CASE("the resolved config written out reads back to the same config", "[config]") {
  Config a = resolved({"parallel.tp=2", "data.path=some dir/with: colon", "train.lr=0.000123456789"}, 4);
  Config b = loom::load_config(write_temp_yaml(loom::to_yaml(a)));
  loom::resolve_and_validate(b, 4);
  CHECK(loom::to_yaml(a) == loom::to_yaml(b));
  CHECK(b.data.path == "some dir/with: colon");
  CHECK(b.train.lr == 0.000123456789);
  CHECK(b.parallel.dp == 2);
}

TEST_CASE("enum keys are parsed as the config is read, and print back as they were written", "[config]") {
  // A bad value fails where it is read (a file or --set), naming the key and every valid value.
  CHECK(load_error("train:\n  precision: fp8\n") ==
        "config key 'train.precision': must be fp32, bf16 or fp16, got 'fp8'");
  CHECK(error_of({"train.recompute=some"}, 1) ==
        "config key 'train.recompute': must be none, full or selective, got 'some'");
  CHECK(error_of({"parallel.schedule=zb"}, 1) ==
        "config key 'parallel.schedule': must be gpipe, 1f1b, interleaved or zb-h1, got 'zb'");
  CHECK(error_of({"train.device=gpu"}, 1) == "config key 'train.device': must be auto, cpu or cuda, got 'gpu'");
  CHECK(error_of({"data.order=random"}, 1) == "config key 'data.order': must be sequential or shuffled, got 'random'");
  CHECK(error_of({"parallel.grad_reduce_dtype=fp16"}, 1) ==
        "config key 'parallel.grad_reduce_dtype': must be fp32 or bf16, got 'fp16'");
  CHECK(error_of({"parallel.backend=mpi"}, 1) ==
        "config key 'parallel.backend': must be auto, gloo or nccl, got 'mpi'");

  const Config c = resolved({"train.precision=bf16", "train.recompute=selective", "parallel.pp=2",
                             "parallel.virtual_stages=2", "parallel.schedule=interleaved", "train.device=cpu",
                             "data.order=shuffled", "parallel.grad_reduce_dtype=bf16", "parallel.backend=gloo"},
                            2);
  CHECK(c.train.precision == loom::TrainPrecision::bf16);
  CHECK(c.train.recompute == loom::Recompute::selective);
  CHECK(c.parallel.schedule == loom::PipelineSchedule::interleaved);
  CHECK(c.train.device == loom::TrainDevice::cpu);
  CHECK(c.data.order == loom::DataOrder::shuffled);
  CHECK(c.parallel.grad_reduce_dtype == loom::GradReduceDtype::bf16);
  CHECK(c.parallel.backend == loom::CommBackend::gloo);
  const std::string yaml = loom::to_yaml(c);
  for (const char* line :
       {"precision: \"bf16\"", "recompute: \"selective\"", "schedule: \"interleaved\"", "device: \"cpu\"",
        "order: \"shuffled\"", "grad_reduce_dtype: \"bf16\"", "backend: \"gloo\""}) {
    CHECK_THAT(yaml, Catch::Contains(line));
  }
  const std::string defaults = loom::to_yaml(Config{});
  for (const char* line : {"precision: \"fp32\"", "recompute: \"none\"", "schedule: \"1f1b\"", "device: \"auto\"",
                           "order: \"sequential\"", "grad_reduce_dtype: \"fp32\"", "backend: \"auto\""}) {
    CHECK_THAT(defaults, Catch::Contains(line));
  }
}

TEST_CASE("train.device resolves to a GPU per local rank, or says why it cannot", "[config]") {
  using loom::resolve_train_device;
  using loom::TrainDevice;
  CHECK(resolve_train_device(TrainDevice::automatic, 0, 1, 0) == torch::Device(torch::kCPU));
  CHECK(resolve_train_device(TrainDevice::cpu, 1, 2, 8) == torch::Device(torch::kCPU));
  CHECK(resolve_train_device(TrainDevice::automatic, 0, 1, 1) == torch::Device(torch::kCUDA, 0));
  CHECK(resolve_train_device(TrainDevice::cuda, 3, 4, 8) == torch::Device(torch::kCUDA, 3));
  auto error = [](TrainDevice setting, int64_t local_rank, int64_t local_world, int64_t gpus) {
    try {
      resolve_train_device(setting, local_rank, local_world, gpus);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error(TrainDevice::cuda, 0, 1, 0), Catch::Contains("'train.device'") && Catch::Contains("sees no GPU"));
  CHECK_THAT(error(TrainDevice::cuda, 2, 4, 2),
             Catch::Contains("'train.device'") && Catch::Contains("runs 4 ranks and sees 2"));
  // too few GPUs: auto stays on the CPU
  CHECK(resolve_train_device(TrainDevice::automatic, 0, 3, 2) == torch::Device(torch::kCPU));
  CHECK_THAT(error_of({"train.device=gpu"}, 1), Catch::Contains("must be auto, cpu or cuda"));
  // A machine with no GPU: auto is the CPU, cuda a clear error.
  if (loom::cuda_runtime_device_count() == 0) {
    CHECK(resolve_train_device(TrainDevice::automatic, 0, 1) == torch::Device(torch::kCPU));
    CHECK_THROWS_AS(resolve_train_device(TrainDevice::cuda, 0, 1), InputError);
  }
}

TEST_CASE("LibTorch's CUDA half is loaded only when a GPU is used, and then registers its kernels", "[config]") {
  // ctest runs one process per test case (catch_discover_tests): nothing has loaded it yet. Run with
  // the other cases in one process, an earlier case's train.device cuda may have.
  auto loaded = [] {
    void* handle = dlopen("libtorch_cuda.so", RTLD_NOLOAD | RTLD_LAZY);
    if (handle != nullptr) dlclose(handle);
    return handle != nullptr;
  };
  if (!loaded()) {
    CHECK(loom::resolve_train_device(loom::TrainDevice::cpu, 0, 1) == torch::Device(torch::kCPU));
    if (loom::cuda_runtime_device_count() == 0) {
      CHECK(loom::resolve_train_device(loom::TrainDevice::automatic, 0, 1) == torch::Device(torch::kCPU));
    }
    CHECK_FALSE(loaded());
  } else {
    WARN("libtorch_cuda.so was loaded by an earlier test case in this process; run this case alone (as ctest does)");
  }
  if (loom::torch_cuda_library().empty()) return;  // a LibTorch without CUDA
  CHECK(loom::load_torch_cuda().empty());
  CHECK(loaded());
  // Its initialisers ran: LibTorch's operators have CUDA kernels now.
  const auto add = c10::Dispatcher::singleton().findSchema({"aten::add", "Tensor"});
  REQUIRE(add.has_value());
  CHECK(add->hasKernelForDispatchKey(c10::DispatchKey::CUDA));
  // ATen takes its CUDA hooks once, at their first use: nothing before the load may have asked for them,
  // or CUDA would be off for the whole process. The stub throws here; the real hooks know their runtime.
  CHECK(at::detail::getCUDAHooks().versionCUDART() > 0);
  CHECK(loom::load_torch_cuda().empty());  // once per process
}

TEST_CASE("what train.device cuda does not take yet is refused before anything is built, naming the key", "[config]") {
  const torch::Device gpu(torch::kCUDA, 0), cpu(torch::kCPU);
  auto refusal = [](const Config& c, const torch::Device& device) {
    try {
      loom::launch::require_supported(c, device, c.parallel.tp * c.parallel.cp * c.parallel.dp * c.parallel.pp);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(refusal(resolved({}, 1), gpu) == "no error");
  CHECK(refusal(resolved({"parallel.zero_stage=1"}, 2), gpu) == "no error");
  CHECK(refusal(resolved({"parallel.zero_stage=3"}, 1), gpu) == "no error");  // one rank: nothing is sharded
  // ZeRO-2/3 shard over dp x cp: cp alone shards too.
  CHECK_THAT(refusal(resolved({"parallel.zero_stage=3"}, 2), gpu), Catch::Contains("'parallel.zero_stage'"));
  CHECK_THAT(refusal(resolved({"parallel.zero_stage=2", "parallel.cp=2", "model.seq_len=64"}, 2), gpu),
             Catch::Contains("'parallel.zero_stage'"));
  CHECK(refusal(resolved({"parallel.zero_stage=2", "parallel.cp=2", "model.seq_len=64"}, 2), cpu) == "no error");
  // Taken on GPUs since 2026-11-28 (bench/gpu/check.sh runs both against the CPU).
  CHECK(refusal(resolved({"model.dropout=0.1"}, 1), gpu) == "no error");
  CHECK(refusal(resolved({"model.moe.num_experts=4"}, 1), gpu) == "no error");
  CHECK_THAT(refusal(resolved({"parallel.backend=nccl"}, 1), cpu), Catch::Contains("'parallel.backend'"));
}

TEST_CASE("the MFU line knows the dense bf16 peak of the common training GPUs", "[config]") {
  using loom::known_bf16_peak_tflops;
  CHECK(known_bf16_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0);
  CHECK(known_bf16_peak_tflops("NVIDIA H100 PCIe") == 756.0);
  CHECK(known_bf16_peak_tflops("NVIDIA H100 NVL") == 835.0);
  CHECK(known_bf16_peak_tflops("NVIDIA H200") == 989.0);
  CHECK(known_bf16_peak_tflops("NVIDIA H200 NVL") == 835.0);
  CHECK(known_bf16_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0);
  CHECK(known_bf16_peak_tflops("NVIDIA GeForce RTX 4090") == 0.0);
  CHECK(known_bf16_peak_tflops("") == 0.0);
}

TEST_CASE("latent attention and multi-token prediction refuse what they cannot run, naming the key", "[config]") {
  const std::vector<std::string> mla = {"model.arch=llama", "model.mla.kv_lora_rank=16", "model.mla.qk_nope_head_dim=8",
                                        "model.mla.qk_rope_head_dim=4", "model.mla.v_head_dim=6"};
  CHECK(resolved(mla, 1).model.head_dim() == 12);
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), mla.begin(), mla.end());
    return more;
  };
  CHECK_THAT(error_of(with({"model.mla.v_head_dim=16"}), 1),
             Catch::Contains("model.mla.v_head_dim") && Catch::Contains("at most"));
  CHECK_THAT(error_of(with({"model.mla.qk_rope_head_dim=3"}), 1), Catch::Contains("model.mla.qk_rope_head_dim"));
  CHECK_THAT(error_of(with({"model.num_kv_heads=2"}), 1), Catch::Contains("model.num_kv_heads"));
  CHECK_THAT(error_of(with({"model.qkv_bias=true"}), 1), Catch::Contains("model.qkv_bias"));
  CHECK_THAT(error_of({"model.mla.q_lora_rank=8"}, 1), Catch::Contains("model.mla.q_lora_rank"));
  CHECK_THAT(error_of({"model.rope_scaling.type=yarn", "model.position=rope", "model.rope_scaling.beta_fast=0.5"}, 1),
             Catch::Contains("model.rope_scaling.beta_fast"));
  // Multi-token prediction: its blocks are MoE blocks in an MoE.
  CHECK(resolved({"model.mtp.depth=2"}, 2).model.mtp.depth == 2);
  CHECK(resolved({"model.mtp.depth=1", "parallel.cp=2"}, 2).model.mtp.depth == 1);
  CHECK_THAT(error_of({"model.mtp.depth=1", "model.moe.num_experts=4", "model.moe.first_k_dense_replace=4"}, 1),
             Catch::Contains("model.moe.first_k_dense_replace"));
  CHECK_THAT(error_of({"model.mtp.depth=-1"}, 1), Catch::Contains("model.mtp.depth"));
}

TEST_CASE("parallel.ranks_per_node cuts the world into whole nodes, or is refused naming the key", "[config]") {
  CHECK(resolved({"parallel.ranks_per_node=2"}, 4).parallel.ranks_per_node == 2);
  CHECK(resolved({}, 4).parallel.ranks_per_node == 0);  // from the launcher
  CHECK_THAT(error_of({"parallel.ranks_per_node=3"}, 4),
             Catch::Contains("parallel.ranks_per_node") && Catch::Contains("does not divide the world of 4"));
  CHECK_THAT(error_of({"parallel.ranks_per_node=-1"}, 4), Catch::Contains("parallel.ranks_per_node"));
}
