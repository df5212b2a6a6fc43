#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/config_fields.h"
#include "core/config_inert.h"
#include "core/per_node_keys.h"

namespace {

std::vector<std::string> warnings_for(const std::vector<std::string>& overrides) {
  const auto path =
      std::filesystem::temp_directory_path() / ("loom_test_config_inert_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << "model:\n  num_layers: 2\ntrain:\n  steps: 4\n";
  const auto config = loom::load_config(path.string(), overrides);
  std::filesystem::remove(path);
  return loom::inert_key_warnings(config);
}

}  // namespace

TEST_CASE("keys the rest of the config turns off are named, with the key that decides", "[config]") {
  CHECK(warnings_for({}).empty());
  CHECK(warnings_for({"train.muon.momentum=0.95", "train.min_loss_scale=1"}).empty());  // defaults, as config.yaml has
  CHECK(warnings_for({"train.muon.lr=0.02"}) ==
        std::vector<std::string>{"train.muon.lr is set, but train.optimizer is adamw: it has no effect"});
  CHECK(warnings_for({"train.muon.lr=0.02", "train.optimizer=muon"}).empty());
  CHECK(warnings_for({"train.min_loss_scale=4", "train.loss_scale_window=10"}) ==
        std::vector<std::string>{"train.loss_scale_window is set, but train.precision is fp32: it has no effect",
                                 "train.min_loss_scale is set, but train.precision is fp32: it has no effect"});
  CHECK(warnings_for({"train.min_loss_scale=4", "train.precision=fp16"}).empty());
  CHECK(warnings_for({"parallel.powersgd.rank=4", "parallel.grad_compression=int8"}) ==
        std::vector<std::string>{
            "parallel.powersgd.rank is set, but parallel.grad_compression is int8: it has no effect"});
  CHECK(warnings_for({"parallel.powersgd.rank=4", "parallel.grad_compression=powersgd"}).empty());
  CHECK(warnings_for({"parallel.grad_compression_error_feedback=false"}).size() == 1);
  CHECK(warnings_for({"train.lr_wsd_decay_steps=2"}).size() == 1);
  CHECK(warnings_for({"train.lr_wsd_decay_steps=2", "train.lr_decay_style=wsd"}).empty());
  CHECK(warnings_for({"model.mtp.loss_weight=0.3"}).size() == 1);
  CHECK(warnings_for({"eval.interval=5", "eval.steps=2"}) ==
        std::vector<std::string>{"eval.interval is set, but there is no validation data (data.valid_path is empty, "
                                 "data.split has no validation part): it has no effect",
                                 "eval.steps is set, but there is no validation data (data.valid_path is empty, "
                                 "data.split has no validation part): it has no effect"});
  CHECK(warnings_for({"eval.interval=5", "data.split=98,2,0"}).empty());
  CHECK(warnings_for({"eval.interval=5", "data.valid_path=somewhere"}).empty());
  CHECK(warnings_for({"eval.interval=5", "data.split=100,0,0"}).size() == 1);
  CHECK(warnings_for({"model.mtp.loss_weight=0.3", "model.mtp.depth=1"}).empty());
  CHECK(warnings_for({"model.moe.top_k=1", "model.moe.num_experts=0"}) ==
        std::vector<std::string>{
            "model.moe.top_k is set, but model.moe.num_experts is 0 (a dense model): it has no effect"});
  CHECK(warnings_for({"model.moe.top_k=1", "model.moe.num_experts=4"}).empty());
  CHECK(warnings_for({"checkpoint.keep=3", "checkpoint.async=true"}).size() == 2);
  CHECK(warnings_for({"checkpoint.keep=3", "checkpoint.dir=/tmp/x"}).empty());
  CHECK(warnings_for({"parallel.cp_comm=a2a"}).size() == 1);
  CHECK(warnings_for({"model.rope_theta=500000"}) ==
        std::vector<std::string>{"model.rope_theta is set, but model.position is learned: it has no effect"});
  CHECK(warnings_for({"model.rope_theta=500000", "model.arch=llama"}).empty());
  // RoPE's scaling: off under learned positions or type none; each type's own keys only under it.
  CHECK(warnings_for({"model.rope_scaling.factor=16"}) ==
        std::vector<std::string>{"model.rope_scaling.factor is set, but model.position is learned: it has no effect"});
  CHECK(warnings_for({"model.arch=llama", "model.rope_scaling.factor=16"}) ==
        std::vector<std::string>{
            "model.rope_scaling.factor is set, but model.rope_scaling.type is none: it has no effect"});
  CHECK(warnings_for({"model.arch=llama", "model.rope_scaling.type=llama3", "model.rope_scaling.beta_fast=16",
                      "model.rope_scaling.mscale=2", "model.rope_scaling.mscale_all_dim=1",
                      "model.rope_scaling.low_freq_factor=2"}) ==
        std::vector<std::string>{
            "model.rope_scaling.beta_fast is set, but model.rope_scaling.type is llama3: it has no effect",
            "model.rope_scaling.mscale is set, but model.rope_scaling.type is llama3: it has no effect"});
  CHECK(warnings_for({"model.arch=llama", "model.rope_scaling.type=yarn", "model.rope_scaling.low_freq_factor=2",
                      "model.rope_scaling.attention_factor=1.2"}) ==
        std::vector<std::string>{
            "model.rope_scaling.low_freq_factor is set, but model.rope_scaling.type is yarn: it has no effect"});
  CHECK(warnings_for({"model.mla.v_head_dim=16"}).size() == 1);
  CHECK(warnings_for({"model.moe.num_experts=4", "model.moe.aux_loss_type=none", "model.moe.aux_loss_coeff=0.1"}) ==
        std::vector<std::string>{
            "model.moe.aux_loss_coeff is set, but model.moe.aux_loss_type is none: it has no effect"});
  CHECK(warnings_for({"train.lr_decay_style=constant", "train.min_lr=0.00005", "train.lr_decay_steps=3"}).size() == 2);
  CHECK(warnings_for({"train.min_lr=0.0001", "train.lr_decay_steps=3"}).empty());
}

TEST_CASE("the per-node keys, and a config without them", "[config]") {
  loom::Config config;
  config.train.threads_per_rank = 3;
  config.train.peak_tflops = 989;
  config.train.device = loom::TrainDevice::cpu;
  config.train.memory_check = false;
  config.train.steps = 7;  // not a node's own
  const loom::Config cleared = loom::without_per_node_keys(config);
  loom::Config expected;
  expected.train.steps = 7;
  CHECK(loom::to_yaml(cleared) == loom::to_yaml(expected));
  for (const auto& key : loom::per_node_keys()) {  // each names a key
    const auto& fields = loom::config_fields();
    CHECK(std::any_of(fields.begin(), fields.end(), [&](const auto& f) { return f.name() == key; }));
  }
}
