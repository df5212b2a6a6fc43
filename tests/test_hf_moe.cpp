// config.json of the mixtures of experts loom reads (Mixtral, Qwen3-MoE) and of Qwen3's attention:
// the keys they give and what is refused; and the class a config.json without "architectures" names. transformers' own
// models are the reference end to end (tests/scripts/transformers_reference.sh).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/hf_architecture.h"
#include "hf_config_json.h"
#include "launch/hf_source.h"
#include "launch/model_record.h"

using namespace loom;

using test::keys_error;
using test::keys_of;
using test::llama_json;

TEST_CASE("config.json: Qwen2's and Qwen3's sliding windows as transformers lays them out, Qwen3's head_dim", "[hf]") {
  // The window is read, not refused: apply_hf_config holds model.seq_len within it (where loom's
  // full attention is the window's).
  const auto window = [](const nlohmann::json& json) { return hf_sliding_window(json, "config.json"); };
  auto qwen2 = llama_json();
  qwen2["architectures"] = {"Qwen2ForCausalLM"};
  qwen2["model_type"] = "qwen2";
  qwen2["use_sliding_window"] = true;
  qwen2["num_hidden_layers"] = 30;  // past max_window_layers' default, 28; the window's default 4096
  CHECK(keys_error(qwen2) == "no error");
  CHECK(window(qwen2) == 4096);
  qwen2["num_hidden_layers"] = 2;
  qwen2["sliding_window"] = 64;
  qwen2["max_window_layers"] = 1;
  CHECK(window(qwen2) == 64);
  // No layer slides where max_window_layers covers them all (as transformers lays them out), or without a window.
  qwen2["max_window_layers"] = 2;
  CHECK(window(qwen2) == 0);
  qwen2["max_window_layers"] = 1;
  qwen2["sliding_window"] = nullptr;
  CHECK(window(qwen2) == 0);
  // transformers 5's layer_types says it layer by layer; a sliding layer needs a window.
  qwen2["layer_types"] = {"full_attention", "full_attention"};
  qwen2["sliding_window"] = 64;
  CHECK(window(qwen2) == 0);
  qwen2["layer_types"] = {"full_attention", "sliding_attention"};
  CHECK(window(qwen2) == 64);
  qwen2["sliding_window"] = nullptr;
  CHECK_THAT(keys_error(qwen2), Catch::Contains("has sliding_attention layers, but sliding_window is null"));
  qwen2["layer_types"] = {"full_attention", "chunked_attention"};
  CHECK_THAT(keys_error(qwen2), Catch::Contains("\"layer_types\" has \"chunked_attention\""));
  qwen2.erase("layer_types");
  // Mistral's window left out is MistralConfig's 4096; null is none.
  auto mistral = llama_json();
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  mistral.erase("sliding_window");
  CHECK(window(mistral) == 4096);
  mistral["sliding_window"] = nullptr;
  CHECK(window(mistral) == 0);
  mistral["sliding_window"] = 0;
  CHECK_THAT(keys_error(mistral), Catch::Contains("\"sliding_window\""));
  // Qwen3 without head_dim: Qwen3Config's 128, not hidden_size / heads; null: hidden_size / heads.
  auto qwen3 = llama_json();
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  qwen3["model_type"] = "qwen3";
  qwen3.erase("head_dim");
  CHECK(keys_of(qwen3).at("model.head_dim") == "128");
  qwen3["head_dim"] = nullptr;
  CHECK(keys_of(qwen3).at("model.head_dim") == "0");
}

TEST_CASE("config.json: Qwen3's head_dim and q/k norms, Qwen3-MoE's and Mixtral's experts", "[hf]") {
  auto qwen3 = llama_json();
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  qwen3["model_type"] = "qwen3";
  qwen3["head_dim"] = 128;  // hidden 64 / 4 heads would be 16
  auto keys = keys_of(qwen3);
  CHECK(keys.at("model.head_dim") == "128");
  CHECK(keys.at("model.qk_norm") == "true");
  CHECK(keys.at("model.bias") == "false");
  CHECK(keys.at("model.qkv_bias") == "false");
  qwen3["head_dim"] = 16;  // as hidden / heads: loom's own rule
  CHECK(keys_of(qwen3).at("model.head_dim") == "0");
  qwen3["use_sliding_window"] = true;
  qwen3["max_window_layers"] = 1;
  CHECK(hf_sliding_window(qwen3, "config.json") == 4096);
  CHECK(keys_of(llama_json()).at("model.qk_norm") == "false");

  auto moe = llama_json();
  moe["architectures"] = {"Qwen3MoeForCausalLM"};
  moe["model_type"] = "qwen3_moe";
  moe["num_local_experts"] = 8;  // transformers 5's name; released checkpoints write num_experts
  moe["num_experts_per_tok"] = 2;
  moe["moe_intermediate_size"] = 24;
  moe["mlp_only_layers"] = {0, 3};
  moe["decoder_sparse_step"] = 1;
  keys = keys_of(moe);
  CHECK(keys.at("model.moe.num_experts") == "8");
  CHECK(keys.at("model.moe.top_k") == "2");
  CHECK(keys.at("model.moe.moe_intermediate_size") == "24");
  CHECK(keys.at("model.moe.mlp_only_layers") == "0,3");
  CHECK(keys.at("model.moe.norm_topk_prob") == "false");  // Qwen3-MoE's default
  CHECK(keys.at("model.ffn_hidden_size") == "96");        // the dense blocks' intermediate_size
  moe["num_experts"] = 16;
  moe["norm_topk_prob"] = true;
  keys = keys_of(moe);
  CHECK(keys.at("model.moe.num_experts") == "16");
  CHECK(keys.at("model.moe.norm_topk_prob") == "true");
  // Qwen3-MoE slides its window in every layer (max_window_layers is not its), 4096 by default.
  moe["use_sliding_window"] = true;
  moe["max_window_layers"] = 28;
  CHECK(hf_sliding_window(moe, "config.json") == 4096);
  moe["sliding_window"] = nullptr;
  CHECK(hf_sliding_window(moe, "config.json") == 0);
  moe.erase("use_sliding_window");
  moe["mlp_only_layers"] = {"a"};
  CHECK_THAT(keys_error(moe), Catch::Contains("\"mlp_only_layers\" must be a list of layer indices"));
  moe["mlp_only_layers"] = nlohmann::json::array();
  moe.erase("moe_intermediate_size");
  CHECK_THAT(keys_error(moe), Catch::Contains("\"moe_intermediate_size\" is missing"));

  auto mixtral = llama_json();
  mixtral["architectures"] = {"MixtralForCausalLM"};
  mixtral["model_type"] = "mixtral";
  mixtral["num_local_experts"] = 8;
  mixtral["num_experts_per_tok"] = 2;
  mixtral["sliding_window"] = nullptr;
  keys = keys_of(mixtral);
  CHECK(keys.at("model.moe.num_experts") == "8");
  CHECK(keys.at("model.moe.norm_topk_prob") == "true");
  CHECK(keys.at("model.qk_norm") == "false");
  mixtral["num_experts_per_tok"] = 1;  // Mixtral would weight the one expert by 1, loom by its score
  CHECK_THAT(keys_error(mixtral), Catch::Contains("\"num_experts_per_tok\" is 1"));
  mixtral["num_experts_per_tok"] = 2;
  mixtral["sliding_window"] = 4096;
  CHECK(hf_sliding_window(mixtral, "config.json") == 4096);
  mixtral.erase("sliding_window");  // MixtralConfig's default: none
  CHECK(hf_sliding_window(mixtral, "config.json") == 0);
  // Keys left out mean MixtralConfig's defaults (rope_theta 1e6, rms_norm_eps 1e-5), not Llama's.
  mixtral["sliding_window"] = nullptr;
  mixtral.erase("rope_theta");
  mixtral.erase("rope_scaling");
  mixtral.erase("rms_norm_eps");
  keys = keys_of(mixtral);
  CHECK(std::stod(keys.at("model.rope_theta")) == 1e6);
  CHECK(std::stod(keys.at("model.norm_eps")) == 1e-5);
  auto llama = llama_json();
  llama.erase("rope_theta");
  llama.erase("rope_scaling");
  llama.erase("rms_norm_eps");
  keys = keys_of(llama);
  CHECK(std::stod(keys.at("model.rope_theta")) == 1e4);
  CHECK(std::stod(keys.at("model.norm_eps")) == 1e-6);
}

TEST_CASE("the checkpoint record of an MoE and Qwen3's attention: one model, one record", "[hf]") {
  Config c;
  c.model.arch = ModelArch::llama;
  c.model.hidden_size = 64;
  c.model.num_heads = 4;
  c.model.ffn_hidden_size = 96;
  resolve_model_defaults(c);
  const auto plain = launch::complete_model_record(launch::model_record(c));
  // A head_dim equal to hidden / heads and an expert width equal to ffn_hidden_size are the same model.
  Config same = c;
  same.model.attention_head_dim = 16;
  CHECK(launch::complete_model_record(launch::model_record(same)) == plain);
  c.model.moe.num_experts = 4;
  c.model.moe.mlp_only_layers = {3, 1, 3};
  same = c;
  same.model.moe.moe_intermediate_size = 96;
  same.model.moe.mlp_only_layers = {1, 3};
  const auto moe = launch::complete_model_record(launch::model_record(c));
  CHECK(launch::complete_model_record(launch::model_record(same)) == moe);
  CHECK(moe.at("moe_mlp_only_layers") == nlohmann::json({1, 3}));
  // Another head width, q/k norms or shared experts differ, named with the default on the other side.
  Config other = c;
  other.model.qk_norm = true;
  other.model.attention_head_dim = 32;
  other.model.moe.n_shared_experts = 1;
  const auto differences =
      launch::model_record_differences(moe, launch::complete_model_record(launch::model_record(other)));
  CHECK(differences.size() == 3);
  CHECK_THAT(differences[0] + differences[1] + differences[2],
             Catch::Contains("model.head_dim = 0, the config 32") &&
                 Catch::Contains("model.qk_norm = false, the config true") &&
                 Catch::Contains("model.moe.n_shared_experts = 0, the config 1"));
  // Experts of the MLP's width against narrower ones: the width on both sides, not "none".
  Config narrow = c;
  narrow.model.moe.moe_intermediate_size = 48;
  const auto width = launch::model_record_differences(moe, launch::complete_model_record(launch::model_record(narrow)));
  REQUIRE(width.size() == 1);
  CHECK(width[0] == "model.moe.moe_intermediate_size = 96, the config 48");
  // A dense checkpoint against an MoE config: the expert count, not the experts' settings as "none".
  const auto dense_side = launch::model_record_differences(plain, moe);
  REQUIRE(dense_side.size() == 1);
  CHECK(dense_side[0] == "model.moe.num_experts = 0, the config 4");
  // The record gives the model back.
  const auto back = launch::config_of_model_record(launch::model_record(other), "manifest");
  CHECK(back.model.qk_norm);
  CHECK(back.model.head_dim() == 32);
  CHECK(back.model.moe.n_shared_experts == 1);
  CHECK(back.model.moe.mlp_only_layers == std::vector<int64_t>{1, 3});
}

// DeepSeek-V3's config.json as the release writes it (transformers 4's form: rope_scaling of type
// yarn, n_routed_experts, the FP8 quantization_config), and the record of what it gives.
TEST_CASE("config.json: DeepSeek-V3's latent attention, router and YaRN; FP8 refused", "[hf]") {
  nlohmann::json ds = {{"architectures", {"DeepseekV3ForCausalLM"}},
                       {"model_type", "deepseek_v3"},
                       {"vocab_size", 129280},
                       {"hidden_size", 7168},
                       {"intermediate_size", 18432},
                       {"moe_intermediate_size", 2048},
                       {"num_hidden_layers", 61},
                       {"num_attention_heads", 128},
                       {"num_key_value_heads", 128},
                       {"n_shared_experts", 1},
                       {"n_routed_experts", 256},
                       {"routed_scaling_factor", 2.5},
                       {"kv_lora_rank", 512},
                       {"q_lora_rank", 1536},
                       {"qk_rope_head_dim", 64},
                       {"v_head_dim", 128},
                       {"qk_nope_head_dim", 128},
                       {"topk_method", "noaux_tc"},
                       {"n_group", 8},
                       {"topk_group", 4},
                       {"num_experts_per_tok", 8},
                       {"moe_layer_freq", 1},
                       {"first_k_dense_replace", 3},
                       {"norm_topk_prob", true},
                       {"scoring_func", "sigmoid"},
                       {"hidden_act", "silu"},
                       {"max_position_embeddings", 163840},
                       {"rms_norm_eps", 1e-6},
                       {"rope_theta", 10000},
                       {"rope_scaling",
                        {{"beta_fast", 32},
                         {"beta_slow", 1},
                         {"factor", 40},
                         {"mscale", 1.0},
                         {"mscale_all_dim", 1.0},
                         {"original_max_position_embeddings", 4096},
                         {"type", "yarn"}}},
                       {"tie_word_embeddings", false},
                       {"attention_bias", false},
                       {"num_nextn_predict_layers", 1}};
  auto keys = keys_of(ds);
  CHECK(keys.at("model.mla.q_lora_rank") == "1536");
  CHECK(keys.at("model.mla.kv_lora_rank") == "512");
  CHECK(keys.at("model.mla.qk_nope_head_dim") == "128");
  CHECK(keys.at("model.mla.qk_rope_head_dim") == "64");
  CHECK(keys.at("model.mla.v_head_dim") == "128");
  CHECK(keys.at("model.rope_interleave") == "true");  // the release's code always interleaves
  CHECK(keys.at("model.rope_scaling.type") == "yarn");
  CHECK(keys.at("model.rope_scaling.factor") == "40");
  CHECK(keys.at("model.rope_scaling.original_max_position_embeddings") == "4096");
  CHECK(keys.at("model.rope_scaling.mscale_all_dim") == "1.0");
  CHECK(keys.at("model.moe.num_experts") == "256");
  CHECK(keys.at("model.moe.score") == "sigmoid");
  CHECK(keys.at("model.moe.n_group") == "8");
  CHECK(keys.at("model.moe.topk_group") == "4");
  CHECK(keys.at("model.moe.routed_scaling_factor") == "2.5");
  CHECK(keys.at("model.moe.expert_bias") == "true");
  CHECK(keys.at("model.moe.first_k_dense_replace") == "3");
  CHECK(keys.at("model.moe.n_shared_experts") == "1");
  // Counts that may be 0; anything but an integer is refused naming the key (a string "1" was read
  // as 0 shared experts, and the file's shared experts' tensors left unused).
  for (const char* key : {"n_shared_experts", "first_k_dense_replace"}) {
    auto zero = ds;
    zero[key] = 0;
    CHECK(keys_of(zero).at(std::string("model.moe.") + key) == "0");
    for (const nlohmann::json& bad :
         {nlohmann::json("1"), nlohmann::json(1.5), nlohmann::json(true), nlohmann::json(-1)}) {
      auto wrong = ds;
      wrong[key] = bad;
      CHECK_THAT(keys_error(wrong), Catch::Contains(std::string("\"") + key + "\" must be an integer of at least 0"));
    }
  }
  CHECK(keys.at("model.num_kv_heads") == "128");
  ds["q_lora_rank"] = nullptr;  // DeepSeek-V2-Lite's: queries straight from the hidden state
  CHECK(keys_of(ds).at("model.mla.q_lora_rank") == "0");
  auto absent = ds;
  absent.erase("q_lora_rank");  // DeepseekV3Config's default
  CHECK(keys_of(absent).at("model.mla.q_lora_rank") == "1536");
  // A Llama-family directory has rotate-half rotary features and no latent attention.
  CHECK(keys_of(llama_json()).at("model.rope_interleave") == "false");
  CHECK(keys_of(llama_json()).at("model.mla.kv_lora_rank") == "0");
  auto fp8 = ds;
  fp8["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}};
  CHECK_THAT(keys_error(fp8), Catch::Contains("\"quantization_config\" is") && Catch::Contains("BF16"));
  ds["scoring_func"] = "softmax";
  CHECK_THAT(keys_error(ds), Catch::Contains("\"scoring_func\" is 'softmax'"));
  ds["scoring_func"] = "sigmoid";
  ds["attention_bias"] = true;
  CHECK_THAT(keys_error(ds), Catch::Contains("\"attention_bias\" is true"));

  // The checkpoint record keeps the latent attention, the interleaving, YaRN and the fixed bias.
  Config c;
  c.model.arch = ModelArch::llama;
  resolve_model_defaults(c);
  c.model.num_heads = 4;
  c.model.mla = {24, 16, 8, 4, 6};
  c.model.rope_interleave = true;
  c.model.rope_scaling.type = RopeScalingKind::yarn;
  c.model.rope_scaling.factor = 4;
  c.model.rope_scaling.mscale = 0.8;
  c.model.moe.num_experts = 4;
  c.model.moe.expert_bias = true;
  c.model.mtp.depth = 2;
  const auto back = launch::config_of_model_record(launch::model_record(c), "manifest");
  CHECK(back.model.mla.q_lora_rank == 24);
  CHECK(back.model.mla.v_head_dim == 6);
  CHECK(back.model.head_dim() == 12);
  CHECK(back.model.rope_interleave);
  CHECK(back.model.rope_scaling.type == RopeScalingKind::yarn);
  CHECK(back.model.rope_scaling.mscale == 0.8);
  CHECK(back.model.moe.expert_bias);
  CHECK(back.model.mtp.depth == 2);
  const auto plain = launch::complete_model_record(launch::model_record(Config{}));
  CHECK(launch::complete_model_record(launch::model_record(back)) != plain);
}

TEST_CASE("config.json without architectures: model_type names the class, as AutoModelForCausalLM reads it", "[hf]") {
  auto qwen2 = llama_json();
  qwen2["architectures"] = {"Qwen2ForCausalLM"};
  qwen2["model_type"] = "qwen2";
  auto untyped = qwen2;
  untyped.erase("architectures");
  CHECK(hf_architecture(untyped) == "Qwen2ForCausalLM");
  CHECK(keys_of(untyped) == keys_of(qwen2));  // the biases on q, k, v among them
  untyped["architectures"] = nullptr;
  CHECK(keys_of(untyped) == keys_of(qwen2));
  // "architectures" says first where both are there (and the keys are refused when they disagree).
  auto both = qwen2;
  both["model_type"] = "llama";
  CHECK(hf_architecture(both) == "Qwen2ForCausalLM");
  for (const auto& [type, architecture] :
       std::vector<std::pair<std::string, std::string>>{{"llama", "LlamaForCausalLM"},
                                                        {"mistral", "MistralForCausalLM"},
                                                        {"qwen3", "Qwen3ForCausalLM"},
                                                        {"mixtral", "MixtralForCausalLM"},
                                                        {"qwen3_moe", "Qwen3MoeForCausalLM"},
                                                        {"deepseek_v3", "DeepseekV3ForCausalLM"},
                                                        {"gpt2", "GPT2LMHeadModel"}})
    CHECK(hf_architecture({{"model_type", type}}) == architecture);

  untyped.erase("architectures");
  untyped["model_type"] = "bert";
  CHECK(keys_error(untyped) ==
        "DIR/config.json: \"architectures\" is missing, and model_type \"bert\" is not one loom reads (llama, mistral, "
        "qwen2, qwen3, mixtral, qwen3_moe, deepseek_v3, gpt2)");
  untyped.erase("model_type");
  CHECK_THAT(keys_error(untyped), Catch::Contains("\"architectures\" is missing, and model_type too"));
  qwen2["architectures"] = {"Qwen2ForCausalLM", "LlamaForCausalLM"};
  CHECK_THAT(keys_error(qwen2), Catch::Contains("must list one architecture"));
  // A class that model_type contradicts: transformers builds model_type's, so neither is guessed.
  qwen2["architectures"] = {"LlamaForCausalLM"};
  CHECK_THAT(keys_error(qwen2), Catch::Contains("\"architectures\" is LlamaForCausalLM but model_type \"qwen2\" is "
                                                "Qwen2ForCausalLM, which transformers' AutoModelForCausalLM builds"));

  // Its export (--format hf) names the class model_type implies; with a list, the list's.
  const nlohmann::ordered_json loom_config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}};
  const nlohmann::json mistral_source = {{"config", {{"model_type", "mistral"}}}};
  auto exported = launch::exported_hf_config(loom_config, mistral_source, true);
  CHECK(exported.at("architectures") == nlohmann::ordered_json::array({"MistralForCausalLM"}));
  CHECK(exported.at("model_type") == "mistral");
  CHECK(launch::exported_hf_config(loom_config, mistral_source, false).at("architectures")[0] == "LlamaForCausalLM");
  const nlohmann::json listed = {{"config", {{"model_type", "mistral"}, {"architectures", {"MistralForCausalLM"}}}}};
  CHECK(launch::exported_hf_config(loom_config, listed, true).at("architectures")[0] == "MistralForCausalLM");
  // A source naming its class only through architectures: the export's model_type is that class's,
  // so that the pair agrees (loom refuses one that does not).
  const nlohmann::json untyped_source = {{"config", {{"architectures", {"Qwen2ForCausalLM"}}}}};
  CHECK(launch::exported_hf_config(loom_config, untyped_source, true).at("model_type") == "qwen2");
  const nlohmann::json null_list = {{"config", {{"model_type", "mistral"}, {"architectures", nullptr}}}};
  CHECK(launch::exported_hf_config(loom_config, null_list, true).at("architectures")[0] == "MistralForCausalLM");
}
