// Hugging Face model directories: Llama names and layouts both ways, sharded
// weights and their index, config.json in and out, and the checkpoint's model
// record that `loom export` reads the architecture from.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/errors.h"
#include "core/hf_config.h"
#include "core/hf_weights.h"
#include "hf_config_json.h"
#include "launch/model_record.h"
#include "models/llama_hf.h"
#include "test_helpers.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

// A tiny Llama: 4 heads of 8, 2 kv heads, untied output; biases as asked.
Config tiny_llama(bool bias = false, bool qkv_bias = false, int64_t kv_heads = 2) {
  Config c;
  c.model.arch = ModelArch::llama;
  resolve_model_defaults(c);
  c.model.num_layers = 2;
  c.model.hidden_size = 32;
  c.model.num_heads = 4;
  c.model.num_kv_heads = kv_heads;
  c.model.ffn_hidden_size = 48;
  c.model.vocab_size = 64;
  c.model.seq_len = 16;
  c.model.bias = bias;
  c.model.qkv_bias = qkv_bias;
  return c;
}

// Random whole tensors under every loom name of CONFIG's Llama, shaped from the table's Hugging Face parts.
std::map<std::string, torch::Tensor> random_loom(const Config& config) {
  torch::manual_seed(7);
  std::map<std::string, torch::Tensor> out;
  for (const auto& t : models::llama_tensors(config)) {
    auto shape = t.hf[0].shape;
    shape[0] *= static_cast<int64_t>(t.hf.size());
    out[t.loom] = torch::randn(shape);
  }
  return out;
}

models::HfTensorReader reader_of(const std::vector<std::pair<std::string, torch::Tensor>>& hf) {
  auto tensors = std::make_shared<std::map<std::string, torch::Tensor>>(hf.begin(), hf.end());
  return [tensors](const std::string& name, const std::vector<int64_t>& shape) {
    auto it = tensors->find(name);
    if (it == tensors->end()) throw InputError("no tensor '" + name + "'");
    REQUIRE(it->second.sizes().vec() == shape);
    return it->second;
  };
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("Llama in Hugging Face names: every tensor, in transformers' order, with its shape", "[hf]") {
  const auto c = tiny_llama();
  std::vector<std::string> names;
  for (const auto& t : models::llama_tensors(c))
    for (const auto& part : t.hf) names.push_back(part.name);
  const std::string l0 = "model.layers.0.";
  const std::vector<std::string> first = {"model.embed_tokens.weight",    l0 + "self_attn.q_proj.weight",
                                          l0 + "self_attn.k_proj.weight", l0 + "self_attn.v_proj.weight",
                                          l0 + "self_attn.o_proj.weight", l0 + "mlp.gate_proj.weight",
                                          l0 + "mlp.up_proj.weight",      l0 + "mlp.down_proj.weight",
                                          l0 + "input_layernorm.weight",  l0 + "post_attention_layernorm.weight"};
  REQUIRE(names.size() == 1 + 2 * 9 + 2);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 10) == first);
  CHECK(names[names.size() - 2] == "model.norm.weight");
  CHECK(names.back() == "lm_head.weight");
  auto tied = c;
  tied.model.tie_embeddings = true;
  CHECK(models::llama_tensors(tied).back().loom == "ln_f.weight");  // the output layer is wte
}

TEST_CASE("Llama to Hugging Face and back gives every tensor back exactly", "[hf]") {
  for (const auto& c : {tiny_llama(), tiny_llama(true, true), tiny_llama(false, true), tiny_llama(false, false, 4),
                        tiny_llama(true, true, 1)}) {
    const auto loom = random_loom(c);
    const auto hf = models::llama_to_hf(loom, c);
    const auto read = reader_of(hf);
    for (const auto& [name, tensor] : loom) {
      const auto back = models::llama_from_hf(name, read, c);
      REQUIRE(back);
      CHECK(torch::equal(*back, tensor));
    }
    CHECK_FALSE(models::llama_from_hf("wpe", read, c));
  }
}

TEST_CASE("Llama's fused projections split into q_proj, k_proj, v_proj head by head", "[hf]") {
  const int64_t d = 8, H = 32;
  // Each row holds its own index, so a row's place says where it came from.
  auto rows = [&](int64_t n) { return torch::arange(n, torch::kFloat32).unsqueeze(1).expand({n, H}).contiguous(); };
  SECTION("multi-head: attn.qkv rows [heads, 3, d]") {
    const auto c = tiny_llama(false, false, 4);
    auto loom = random_loom(c);
    loom["h.0.attn.qkv.weight"] = rows(4 * 3 * d);
    std::map<std::string, torch::Tensor> hf;
    for (auto& [name, t] : models::llama_to_hf(loom, c)) hf[name] = t;
    for (int64_t head = 0; head < 4; ++head) {
      for (int64_t j = 0; j < d; ++j) {
        CHECK(hf["model.layers.0.self_attn.q_proj.weight"][head * d + j][0].item<float>() == head * 3 * d + j);
        CHECK(hf["model.layers.0.self_attn.k_proj.weight"][head * d + j][0].item<float>() == head * 3 * d + d + j);
        CHECK(hf["model.layers.0.self_attn.v_proj.weight"][head * d + j][0].item<float>() == head * 3 * d + 2 * d + j);
      }
    }
  }
  SECTION("grouped-query: attn.q as it is, attn.kv rows [kv heads, 2, d]") {
    const auto c = tiny_llama();
    auto loom = random_loom(c);
    loom["h.1.attn.kv.weight"] = rows(2 * 2 * d);
    std::map<std::string, torch::Tensor> hf;
    for (auto& [name, t] : models::llama_to_hf(loom, c)) hf[name] = t;
    CHECK(torch::equal(hf["model.layers.1.self_attn.q_proj.weight"], loom["h.1.attn.q.weight"]));
    for (int64_t kv = 0; kv < 2; ++kv) {
      for (int64_t j = 0; j < d; ++j) {
        CHECK(hf["model.layers.1.self_attn.k_proj.weight"][kv * d + j][0].item<float>() == kv * 2 * d + j);
        CHECK(hf["model.layers.1.self_attn.v_proj.weight"][kv * d + j][0].item<float>() == kv * 2 * d + d + j);
      }
    }
  }
}

TEST_CASE("Hugging Face weights: one file, or shards and an index above the shard size", "[hf]") {
  const auto dir = test::temp_dir("hf_weights");
  torch::manual_seed(1);
  // 100 floats = 400 bytes each.
  const std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"b.weight", torch::randn({10, 10})}, {"a.weight", torch::randn({100})}, {"c", torch::randn({4, 25})}};
  SECTION("under the limit: model.safetensors alone") {
    CHECK(write_hf_weights(dir, tensors, 1200, {{"format", "pt"}}) == std::vector<std::string>{"model.safetensors"});
    CHECK_FALSE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  }
  SECTION("over it: shards in order, each up to the limit, and the index") {
    const auto files = write_hf_weights(dir, tensors, 800, {{"format", "pt"}});
    CHECK(files == std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                            "model.safetensors.index.json"});
    CHECK_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
    nlohmann::json index;
    std::ifstream(fs::path(dir) / "model.safetensors.index.json") >> index;
    CHECK(index.at("metadata").at("total_size") == 1200);
    CHECK(index.at("weight_map") == nlohmann::json({{"b.weight", "model-00001-of-00002.safetensors"},
                                                    {"a.weight", "model-00001-of-00002.safetensors"},
                                                    {"c", "model-00002-of-00002.safetensors"}}));
    CHECK(read_safetensors(dir + "/model-00002-of-00002.safetensors").size() == 1);
  }
  SECTION("a tensor bigger than the limit gets a shard to itself") {
    CHECK(write_hf_weights(dir, tensors, 100, {}).size() == 4);
  }
  const HfWeights weights(dir);
  CHECK(weights.names() == std::vector<std::string>{"a.weight", "b.weight", "c"});
  for (const auto& [name, tensor] : tensors) CHECK(torch::equal(weights.read(name, tensor.sizes().vec()), tensor));
  CHECK(error_of([&] { weights.read("d"); }) ==
        "Hugging Face model directory '" + dir + "' has no tensor 'd' " + "(" +
            (fs::exists(dir + "/model.safetensors") ? "model.safetensors" : "model.safetensors.index.json") +
            " does not list it)");
  const auto misshapen = error_of([&] { weights.read("c", {25, 4}); });
  CHECK_THAT(misshapen,
             Catch::Contains("tensor 'c' in '" + weights.file_of("c") + "' has shape [4, 25] where [25, 4]"));
  fs::remove_all(dir);
}

TEST_CASE("Hugging Face weights: a broken directory or index is refused naming the file", "[hf]") {
  const auto dir = test::temp_dir("hf_weights_bad");
  CHECK_THAT(error_of([&] { HfWeights w(dir); }),
             Catch::Contains("'" + dir + "' has neither model.safetensors nor model.safetensors.index.json"));
  write_hf_weights(dir, {{"a", torch::ones({300})}, {"b", torch::ones({300})}}, 1000, {});
  write_text(fs::path(dir) / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}})");
  CHECK_THAT(error_of([&] { HfWeights w(dir); }),
             Catch::Contains("puts tensor 'b' in model-00001-of-00002.safetensors, which has no such tensor"));
  write_text(fs::path(dir) / "model.safetensors.index.json", R"({"weight_map": {"a": "gone.safetensors"}})");
  CHECK_THAT(error_of([&] { HfWeights w(dir); }), Catch::Contains("gone.safetensors"));
  fs::remove_all(dir);
}

TEST_CASE("the size of --max-shard-size is read as transformers writes it", "[hf]") {
  CHECK(parse_byte_size("5GB", "s") == 5000000000);
  CHECK(parse_byte_size("500MB", "s") == 500000000);
  CHECK(parse_byte_size("2GiB", "s") == 2147483648);
  CHECK(parse_byte_size("10KiB", "s") == 10240);
  CHECK(parse_byte_size("1.5kb", "s") == 1500);
  CHECK(parse_byte_size("4096", "s") == 4096);
  for (const std::string bad : {"", "GB", "5 GB", "5XB", "0", "-1MB"})
    CHECK_THAT(error_of([&] { parse_byte_size(bad, "--max-shard-size"); }),
               Catch::Contains("--max-shard-size '" + bad + "' is not a size"));
  CHECK(parse_byte_size("4194304TiB", "s") == int64_t{1} << 62);
  for (const std::string huge : {"9223372036854775808", "4194305TiB", "99999999999999999999999TB"})
    CHECK_THAT(error_of([&] { parse_byte_size(huge, "--max-shard-size"); }),
               Catch::Contains("--max-shard-size '" + huge + "' is larger than 4 EiB"));
}

using test::keys_error;
using test::keys_of;
using test::llama_json;

TEST_CASE("config.json: Llama, Mistral and Qwen2 give the llama keys, GPT-2 the gpt2 ones", "[hf]") {
  auto keys = keys_of(llama_json());
  CHECK(keys.at("model.arch") == "llama");
  CHECK(keys.at("model.hidden_size") == "64");
  CHECK(keys.at("model.ffn_hidden_size") == "96");
  CHECK(keys.at("model.num_kv_heads") == "2");
  CHECK(keys.at("model.norm_eps") == "1e-05");
  CHECK(keys.at("model.rope_theta") == "500000.0");
  CHECK(keys.at("model.rope_scaling.type") == "llama3");
  CHECK(keys.at("model.rope_scaling.factor") == "32.0");
  CHECK(keys.at("model.rope_scaling.original_max_position_embeddings") == "8192");
  CHECK(keys.at("model.tie_embeddings") == "true");
  CHECK(keys.at("model.bias") == "false");
  CHECK(keys.at("model.qkv_bias") == "false");

  auto mistral = llama_json();
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = nullptr;
  mistral.erase("num_key_value_heads");  // MistralConfig's default, 8 (Qwen2's and Qwen3's 32, Llama's the heads)
  mistral["rope_scaling"] = nullptr;
  keys = keys_of(mistral);
  CHECK(keys.at("model.num_kv_heads") == "8");
  mistral["num_key_value_heads"] = nullptr;  // null: num_attention_heads
  keys = keys_of(mistral);
  CHECK(keys.at("model.num_kv_heads") == "4");
  CHECK(keys.at("model.rope_scaling.type") == "none");

  auto qwen2 = llama_json();
  qwen2["architectures"] = {"Qwen2ForCausalLM"};
  qwen2["model_type"] = "qwen2";
  qwen2["use_sliding_window"] = false;
  qwen2["sliding_window"] = 4096;  // unused without use_sliding_window
  keys = keys_of(qwen2);
  CHECK(keys.at("model.bias") == "false");
  CHECK(keys.at("model.qkv_bias") == "true");

  const auto gpt2 = nlohmann::json::parse(R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 48, "n_layer": 3,
    "n_head": 3, "n_inner": null, "n_positions": 1024, "vocab_size": 100, "layer_norm_epsilon": 1e-05,
    "activation_function": "gelu_new"})");
  keys = keys_of(gpt2);
  CHECK(keys.at("model.arch") == "gpt2");
  CHECK(keys.at("model.ffn_hidden_size") == "192");
  CHECK(keys.at("model.num_layers") == "3");
}

// transformers 5.x writes rope_theta and the scaling inside rope_parameters, and no top-level rope_theta.
TEST_CASE("config.json: transformers 5's rope_parameters give the theta and scaling", "[hf]") {
  auto v5 = llama_json();
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_theta", 50000.0}, {"rope_type", "default"}};
  auto keys = keys_of(v5);
  CHECK(keys.at("model.rope_theta") == "50000.0");
  CHECK(keys.at("model.rope_scaling.type") == "none");

  v5["rope_parameters"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 64},
                           {"rope_theta", 500000.0}};
  keys = keys_of(v5);
  CHECK(keys.at("model.rope_theta") == "500000.0");
  CHECK(keys.at("model.rope_scaling.type") == "llama3");
  CHECK(keys.at("model.rope_scaling.factor") == "8.0");
  CHECK(keys.at("model.rope_scaling.original_max_position_embeddings") == "64");
  CHECK(keys.count("model.rope_scaling.mscale_all_dim") == 0);
  // DeepSeek-V3's latent attention reads mscale_all_dim under llama3 too (yarn_apply_mscale).
  v5["rope_parameters"]["mscale_all_dim"] = 1.0;
  CHECK(keys_of(v5).at("model.rope_scaling.mscale_all_dim") == "1.0");
  v5["rope_parameters"].erase("mscale_all_dim");
  // Without its own rope_theta, rope_parameters takes the top-level one, as transformers does.
  v5["rope_parameters"].erase("rope_theta");
  v5["rope_theta"] = 40000.0;
  CHECK(keys_of(v5).at("model.rope_theta") == "40000.0");
  v5.erase("rope_theta");

  // YaRN: beta_fast and beta_slow default to 32 and 1, the mscales and attention factor to 0 (derived).
  v5["rope_parameters"] = {{"rope_type", "yarn"},
                           {"factor", 4.0},
                           {"rope_theta", 10000.0},
                           {"original_max_position_embeddings", 16},
                           {"mscale_all_dim", 1.0}};
  keys = keys_of(v5);
  CHECK(keys.at("model.rope_scaling.type") == "yarn");
  CHECK(keys.at("model.rope_scaling.factor") == "4.0");
  CHECK(keys.at("model.rope_scaling.original_max_position_embeddings") == "16");
  CHECK(keys.at("model.rope_scaling.beta_fast") == "32.0");
  CHECK(keys.at("model.rope_scaling.beta_slow") == "1.0");
  CHECK(keys.at("model.rope_scaling.mscale") == "0.0");
  CHECK(keys.at("model.rope_scaling.mscale_all_dim") == "1.0");
  // Without factor, transformers takes max_position_embeddings over the original length.
  v5["rope_parameters"].erase("factor");
  v5["max_position_embeddings"] = 64;
  CHECK(keys_of(v5).at("model.rope_scaling.factor") == "4.0");
  v5["rope_parameters"]["truncate"] = false;
  CHECK_THAT(keys_error(v5), Catch::Contains("\"rope_parameters.truncate\" is false"));
  // Without original_max_position_embeddings, transformers takes max_position_embeddings.
  v5["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 10000.0}};
  CHECK(keys_of(v5).at("model.rope_scaling.original_max_position_embeddings") == "64");
  v5["rope_parameters"]["original_max_position_embeddings"] = "x";
  CHECK_THAT(keys_error(v5),
             Catch::Contains("\"rope_parameters.original_max_position_embeddings\" must be a positive integer"));
  v5["rope_parameters"] = {{"rope_type", "longrope"}, {"factor", 4.0}, {"rope_theta", 10000.0}};
  CHECK_THAT(keys_error(v5), Catch::Contains("\"rope_parameters.rope_type\" is 'longrope'"));
  v5["rope_parameters"] = {{"rope_type", "default"}};
  CHECK_THAT(keys_error(v5), Catch::Contains("\"rope_parameters.rope_theta\" must be a number"));
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 50000.0}};
  v5["rope_theta"] = 10000.0;
  CHECK_THAT(keys_error(v5), Catch::Contains("\"rope_theta\" is 10000.0 but rope_parameters.rope_theta is 50000.0"));

  auto qwen2 = llama_json();
  qwen2["architectures"] = {"Qwen2ForCausalLM"};
  qwen2["model_type"] = "qwen2";
  qwen2["layer_types"] = {"full_attention", "sliding_attention"};
  CHECK(hf_sliding_window(qwen2, "DIR/config.json") == 4096);  // read; model.seq_len is held within it
}

TEST_CASE("config.json: what loom cannot represent is refused naming the key", "[hf]") {
  auto with = [](const std::string& key, const nlohmann::json& value) {
    auto json = llama_json();
    json[key] = value;
    return json;
  };
  CHECK(keys_error(with("architectures", {"FalconForCausalLM"})) ==
        "DIR/config.json: \"architectures\" is FalconForCausalLM; loom reads LlamaForCausalLM, MistralForCausalLM, "
        "Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, "
        "DeepseekV3ForCausalLM and GPT2LMHeadModel");
  // Sliding windows are read (tests/test_hf_moe.cpp), model.seq_len held within them.
  CHECK_THAT(keys_error(with("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 4.0}})),
             Catch::Contains("\"rope_scaling.rope_type\" is 'dynamic'"));
  CHECK_THAT(keys_error(with("hidden_act", "gelu")), Catch::Contains("\"hidden_act\" is 'gelu'"));
  CHECK_THAT(keys_error(with("hidden_act", nullptr)), Catch::Contains("\"hidden_act\" is null"));
  CHECK_THAT(keys_error(with("attention_bias", true)),
             Catch::Contains("\"mlp_bias\" is false and attention_bias true"));
  CHECK_THAT(keys_error(with("mlp_bias", true)), Catch::Contains("\"mlp_bias\" is true and attention_bias false"));
  CHECK_THAT(keys_error(with("hidden_size", nullptr)), Catch::Contains("\"hidden_size\" is missing"));
  CHECK_THAT(keys_error(with("num_hidden_layers", 2.5)), Catch::Contains("\"num_hidden_layers\" must be a positive"));
}

TEST_CASE("model.init_from a directory takes config.json's keys and refuses a contradicting config", "[hf]") {
  const auto dir = test::temp_dir("hf_config_apply");
  write_text(fs::path(dir) / "config.json", llama_json().dump());
  auto load = [&](const std::string& model_yaml) {
    const auto yaml = fs::path(dir) / "job.yaml";
    write_text(yaml, "model:\n  init_from: " + dir + "\n" + model_yaml);
    return load_config(yaml.string());
  };
  const auto c = load("  seq_len: 48\n  num_heads: 4\n");
  CHECK(c.model.arch == ModelArch::llama);
  CHECK(c.model.norm == NormKind::rmsnorm);
  CHECK(c.model.activation == Activation::swiglu);
  CHECK(c.model.position == PositionKind::rope);
  CHECK(c.model.hidden_size == 64);
  CHECK(c.model.num_kv_heads == 2);
  CHECK(c.ffn_size() == 96);
  CHECK(c.model.rope_theta == 500000.0);
  CHECK(c.model.rope_scaling.type == RopeScalingKind::llama3);
  CHECK(c.model.rope_scaling.factor == 32.0);
  CHECK(c.model.tie_embeddings);
  CHECK(c.model.seq_len == 48);  // the config's own
  const std::string yaml = (fs::path(dir) / "job.yaml").string(), json = (fs::path(dir) / "config.json").string();
  const std::string hint =
      ". The model keys come from config.json: leave them out of the config (configs/finetune_hf.yaml sets none) or "
      "give config.json's values";
  CHECK(error_of([&] { load("  hidden_size: 576\n"); }) ==
        "model.hidden_size is 576 in " + yaml + " but " + json + " says 64" + hint);
  CHECK(error_of([&] { load_config((fs::path(dir) / "job.yaml").string(), {"model.hidden_size=32"}); }) ==
        "model.hidden_size is 32 by --set but " + json + " says 64" + hint);
  CHECK(error_of([&] { load("  arch: gpt2\n"); }) ==
        "model.arch is gpt2 in " + yaml + " but " + json + " says llama" + hint);
  CHECK(error_of([&] { load("  norm: layernorm\n"); }) ==
        "model.norm is layernorm in " + yaml + " but " + json + " says rmsnorm" + hint);
  CHECK(error_of([&] { load("  num_kv_heads: 4\n"); }) ==
        "model.num_kv_heads is 4 in " + yaml + " but " + json + " says 2" + hint);
  // Every conflict at once, counted.
  CHECK(error_of([&] { load("  hidden_size: 576\n  num_kv_heads: 4\n"); }) ==
        "model.hidden_size is 576 in " + yaml + " but " + json + " says 64; model.num_kv_heads is 4 in " + yaml +
            " but " + json + " says 2 (2 keys)" + hint);
  // An explicit value equal to config.json's, or a derived one that comes out the same, is no contradiction.
  CHECK(error_of([&] { load("  arch: llama\n  hidden_size: 64\n  ffn_hidden_size: 96\n"); }) == "no error");
  // A value config.json gives that the checks refuse names the file it came from.
  auto odd = llama_json();
  odd["rope_scaling"]["low_freq_factor"] = 4.0;
  write_text(fs::path(dir) / "config.json", odd.dump());
  auto refused = load("  seq_len: 48\n");
  CHECK(error_of([&] { resolve_and_validate(refused, 1); }) ==
        "config key 'model.rope_scaling.high_freq_factor': must be above model.rope_scaling.low_freq_factor, which is "
        "positive (model.rope_scaling.high_freq_factor is read from " +
            json + ")");
  auto mha = llama_json();
  mha["num_key_value_heads"] = 4;
  write_text(fs::path(dir) / "config.json", mha.dump());
  CHECK(error_of([&] { load("  num_kv_heads: 0\n"); }) == "no error");
  const auto gpt2 = nlohmann::json::parse(
      R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 48, "n_layer": 3, "n_head": 3, "n_positions": 32,
          "vocab_size": 100})");
  write_text(fs::path(dir) / "config.json", gpt2.dump());
  CHECK(load("  seq_len: 32\n").model.hidden_size == 48);
  CHECK(error_of([&] { load("  seq_len: 64\n"); }) == "model.seq_len is 64 in " + yaml + " but the GPT-2 in " + json +
                                                          " has position embeddings for n_positions = 32 tokens");
  // A bad n_positions is named as the file's, not blamed on model.seq_len.
  for (const auto& bad :
       {nlohmann::json(-1), nlohmann::json(0), nlohmann::json("abc"), nlohmann::json(2.5), nlohmann::json(nullptr)}) {
    auto odd_gpt2 = gpt2;
    odd_gpt2["n_positions"] = bad;
    write_text(fs::path(dir) / "config.json", odd_gpt2.dump());
    INFO(bad.dump());
    CHECK_THAT(error_of([&] { load("  seq_len: 32\n"); }), Catch::Contains("n_positions") &&
                                                               Catch::Contains("must be a positive integer") &&
                                                               !Catch::Contains("model.seq_len"));
  }
  fs::remove(fs::path(dir) / "config.json");
  CHECK(error_of([&] { load(""); }) ==
        "model.init_from: Hugging Face model directory '" + dir + "' has no config.json");
  fs::remove_all(dir);
}

TEST_CASE("config.json out: what loom writes reads back to the same model", "[hf]") {
  auto round_trip = [](const Config& c, const std::string& format) {
    Config back;
    for (const auto& [key, text] : model_keys_of_hf_config(nlohmann::json::parse(hf_config_of(c, format).dump()), "x"))
      apply_override(back, key + "=" + text);
    back.model.seq_len = c.model.seq_len;
    CHECK(launch::model_record(back) == launch::model_record(c));
  };
  auto llama = tiny_llama();
  llama.model.rope_scaling.type = RopeScalingKind::llama3;
  llama.model.rope_theta = 500000;
  llama.model.norm_eps = 1e-6;
  round_trip(llama, "hf-llama");
  CHECK(hf_config_of(llama, "hf-llama").at("architectures")[0] == "LlamaForCausalLM");
  const auto qwen2 = tiny_llama(false, true);
  round_trip(qwen2, "hf-llama");
  CHECK(hf_config_of(qwen2, "hf-llama").at("architectures")[0] == "Qwen2ForCausalLM");
  round_trip(tiny_llama(true, true), "hf-llama");
  Config gpt2;
  gpt2.model.ffn_hidden_size = 100;
  round_trip(gpt2, "hf-gpt2");

  CHECK(error_of([&] { hf_config_of(llama, "hf-gpt2"); }) ==
        "--format hf-gpt2 cannot represent model.norm = rmsnorm: GPT-2 has LayerNorm");
  CHECK(error_of([&] { hf_config_of(gpt2, "hf-llama"); }) ==
        "the Hugging Face export cannot represent model.norm = layernorm: Llama has RMSNorm");
  auto mixtral = tiny_llama();
  mixtral.model.moe.num_experts = 4;
  mixtral.model.qkv_bias = true;
  CHECK_THAT(error_of([&] { hf_config_of(mixtral, "hf-llama"); }),
             Catch::Contains("cannot represent model.qkv_bias = true: Mixtral has no biases"));
  CHECK_THAT(error_of([&] { hf_config_of(tiny_llama(true, false), "hf-llama"); }),
             Catch::Contains("cannot represent model.qkv_bias = false"));
  auto moe = gpt2;
  moe.model.moe.num_experts = 4;
  CHECK_THAT(error_of([&] { hf_config_of(moe, "hf-gpt2"); }), Catch::Contains("model.moe.num_experts = 4"));
}

TEST_CASE("the checkpoint's model record: GPT-2's as before, other architectures in full", "[hf]") {
  const Config gpt2;
  CHECK(launch::model_record(gpt2) == nlohmann::json({{"num_layers", 2},
                                                      {"hidden_size", 64},
                                                      {"num_heads", 4},
                                                      {"ffn_hidden_size", 256},
                                                      {"vocab_size", 256},
                                                      {"seq_len", 64}}));
  auto llama = tiny_llama();
  llama.model.rope_scaling.type = RopeScalingKind::llama3;
  const auto record = launch::model_record(llama);
  CHECK(record.at("arch") == "llama");
  CHECK(record.at("num_kv_heads") == 2);
  CHECK(record.at("rope_scaling").at("type") == "llama3");
  CHECK(record.at("bias") == false);
  const auto back = launch::config_of_model_record(record, "manifest");
  CHECK(launch::model_record(back) == record);
  CHECK(launch::complete_model_record(launch::model_record(gpt2)).at("arch") == "gpt2");
  CHECK(launch::complete_model_record(launch::model_record(gpt2)) !=
        launch::complete_model_record(launch::model_record(tiny_llama())));
}
