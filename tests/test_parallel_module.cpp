// parallel/parallel_module.h: the parameters a model's layers described, in order,
// and a parameter nobody described refused by name; loom plan's count of a pipeline stage's.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "core/errors.h"
#include "launch/layout_cost.h"
#include "models/gpt.h"
#include "parallel/parallel_module.h"
#include "parallel/tensor_parallel.h"

using namespace loom;

namespace {

// A user's model that adds a parameter of its own without describing it.
struct Forgetful : models::LanguageModel {
  Forgetful() {
    up = register_module("up",
                         parallel::ColumnParallelLinear(parallel::ColumnParallelLinearOptions(4, 8).name("up"), tp));
    scale = register_parameter("scale", torch::ones({8}));
  }
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor&) override {
    return up->forward(input) * scale;
  }
  parallel::SelfCommunicator tp{"tp", 0, std::make_shared<parallel::CommStats>()};
  parallel::ColumnParallelLinear up{nullptr};
  torch::Tensor scale;
};

// A user's model with one slip each (SLIP): a block used in two places, two layers of one global
// name, a frozen parameter, an empty name; none: two layers, each named and trained.
struct Slipped : models::LanguageModel {
  explicit Slipped(const std::string& slip) {
    using parallel::ColumnParallelLinear, parallel::ColumnParallelLinearOptions;
    a = register_module("a",
                        ColumnParallelLinear(ColumnParallelLinearOptions(4, 4).name(slip == "empty" ? "" : "a"), tp));
    b = slip == "shared" ? a
                         : ColumnParallelLinear(ColumnParallelLinearOptions(4, 4).name(slip == "name" ? "a" : "b"), tp);
    register_module("b", b);
    if (slip == "frozen") b->weight.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor&) override {
    return b->forward(a->forward(input));
  }
  parallel::SelfCommunicator tp{"tp", 0, std::make_shared<parallel::CommStats>()};
  parallel::ColumnParallelLinear a{nullptr}, b{nullptr};
};

// A GPT small enough to build in a unit test: hidden 8, 2 heads, ffn 16, L layers.
models::GPTOptions tiny_gpt(int64_t layers) {
  models::GPTOptions o;
  o.num_layers = layers;
  o.hidden_size = 8;
  o.num_heads = 2;
  o.ffn_hidden_size = 16;
  return o;
}

}  // namespace

TEST_CASE("a GPT's parameters are collected from its layers, in order of use", "[parallel_module]") {
  auto o = tiny_gpt(1);
  o.vocab_size = 11;
  o.seq_len = 4;
  auto model = std::make_shared<models::GPTImpl>(o);
  std::vector<std::string> names;
  for (const auto& p : model->parallel_parameters()) names.push_back(p.name);
  const std::vector<std::string> expected{"wte",
                                          "wpe",
                                          "h.0.ln_1.weight",
                                          "h.0.ln_1.bias",
                                          "h.0.attn.qkv.weight",
                                          "h.0.attn.qkv.bias",
                                          "h.0.attn.proj.weight",
                                          "h.0.attn.proj.bias",
                                          "h.0.ln_2.weight",
                                          "h.0.ln_2.bias",
                                          "h.0.mlp.fc.weight",
                                          "h.0.mlp.fc.bias",
                                          "h.0.mlp.proj.weight",
                                          "h.0.mlp.proj.bias",
                                          "ln_f.weight",
                                          "ln_f.bias"};
  CHECK(names == expected);
  // Every registered parameter is described exactly once, by the very tensor the module holds.
  CHECK(model->named_parameters().size() == expected.size());
  for (const auto& p : model->parallel_parameters()) {
    int holders = 0;
    for (const auto& item : model->named_parameters()) holders += item.value().is_same(p.tensor);
    CHECK(holders == 1);
  }
  const auto params = model->parallel_parameters();
  CHECK(params[0].tp_split_dim == 0);                            // wte: vocabulary split
  CHECK(params[0].global_shape == std::vector<int64_t>{11, 8});  // without tp padding
  CHECK(params[4].tp_split_dim == 0);                            // qkv: column parallel
  CHECK(params[6].tp_split_dim == 1);                            // proj: row parallel
  CHECK(params[7].tp_split_dim == -1);                           // proj bias: replicated
}

TEST_CASE("a parameter no layer described is refused by name", "[parallel_module]") {
  auto model = std::make_shared<Forgetful>();
  try {
    model->parallel_parameters();
    FAIL("an undescribed parameter was accepted");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("'scale'") != std::string::npos);
    CHECK(what.find("'up.weight'") == std::string::npos);  // the described ones are not blamed
  }
}

TEST_CASE("a parameter described twice, two of one name, a frozen or unnamed one are refused by name",
          "[parallel_module]") {
  CHECK(std::make_shared<Slipped>("none")->parallel_parameters().size() == 4);
  // Each would train wrong or save what no resume reads: a shared block stepped twice per step.
  CHECK_THROWS_WITH(std::make_shared<Slipped>("shared")->parallel_parameters(),
                    Catch::Contains("'a.weight' (in the module 'b') is 'a.weight' (in the module 'a') again"));
  CHECK_THROWS_WITH(
      std::make_shared<Slipped>("name")->parallel_parameters(),
      Catch::Contains("two parameters have the global name 'a.weight'") && Catch::Contains("(in the module 'b')"));
  CHECK_THROWS_WITH(std::make_shared<Slipped>("frozen")->parallel_parameters(),
                    Catch::Contains("'b.weight' (in the module 'b') does not require a gradient"));
  CHECK_THROWS_WITH(std::make_shared<Slipped>("empty")->parallel_parameters(),
                    Catch::Contains("'.weight' (in the module 'a') has an empty global name"));
  // A model that does not split sequences over cp is refused there, naming the key; GPT does. So is full
  // recomputation of a model that declares no blocks (it recomputed nothing, silently).
  CHECK_NOTHROW(models::require_layout_support(Slipped("none"), 1, Recompute::none));
  CHECK_THROWS_WITH(models::require_layout_support(Slipped("none"), 1, Recompute::selective),
                    Catch::Contains("config key 'train.recompute'") && Catch::Contains("recomputes_selectively"));
  CHECK_THROWS_WITH(models::require_layout_support(Slipped("none"), 2, Recompute::none),
                    Catch::Contains("config key 'parallel.cp'"));
  CHECK_THROWS_WITH(models::require_layout_support(Slipped("none"), 1, Recompute::full),
                    Catch::Contains("config key 'train.recompute'") && Catch::Contains("declares none"));
  CHECK_NOTHROW(models::require_layout_support(models::GPTImpl(tiny_gpt(1)), 2, Recompute::full));
  CHECK_NOTHROW(models::require_layout_support(models::GPTImpl(tiny_gpt(1)), 2, Recompute::selective));
  // The last piece's forward gives the batch's mean loss: a per-token loss (no .mean()) is said so.
  CHECK_NOTHROW(models::require_scalar_loss(torch::tensor(2.0)));
  CHECK_NOTHROW(models::require_scalar_loss(torch::ones({1})));
  CHECK_THROWS_WITH(models::require_scalar_loss(torch::ones({64})),
                    Catch::Contains("a tensor of shape [64]") && Catch::Contains(".mean()"));
  // A row-parallel layer fed the wrong width names itself (a column layer's gather_output at tp > 1).
  parallel::SelfCommunicator tp{"tp", 0, std::make_shared<parallel::CommStats>()};
  parallel::RowParallelLinear down(parallel::RowParallelLinearOptions(8, 4).name("down").input_is_parallel(true), tp);
  CHECK(down->forward(torch::ones({2, 8})).sizes() == torch::IntArrayRef{2, 4});
  CHECK_THROWS_WITH(down->forward(torch::ones({2, 6})),
                    Catch::Contains("down: its input has 6 features where it takes 8"));
}

TEST_CASE("the last pipeline stage's word embedding is a tied copy", "[parallel_module]") {
  const auto o = tiny_gpt(2);
  auto last = std::make_shared<models::GPTImpl>(o, models::TensorParallelContext{}, models::PipelinePosition{1, 2});
  int tied = 0;
  for (const auto& p : last->parallel_parameters()) {
    if (p.name == "wte") {
      CHECK(p.tied_copy);
      ++tied;
    } else {
      CHECK_FALSE(p.tied_copy);
    }
  }
  CHECK(tied == 1);
}

TEST_CASE("loom plan's parameters per rank at pp 2 are the heavier end stage's, as built", "[parallel_module][plan]") {
  // Llama's shape (RoPE, no position table) and GPT's (a learned one), tied and untied, with and
  // without multi-token prediction: the first stage holds the embeddings, the last the final norm,
  // the output layer or its tied copy of the word embedding, and the MTP modules.
  for (const std::string name : {"llama_tiny.yaml", "gpt_tiny.yaml"}) {
    for (const bool tie : {false, true}) {
      for (const int64_t mtp : {0, 1}) {
        Config c = load_config(std::string(LOOM_SOURCE_DIR) + "/configs/" + name);
        c.model.tie_embeddings = tie;
        c.model.mtp.depth = mtp;
        c.parallel.pp = 2;
        resolve_model_defaults(c);
        double heaviest = 0;
        for (int64_t stage = 0; stage < 2; ++stage) {
          const auto piece = models::make_gpt_piece(c, {}, models::PipelinePosition{stage, 2});
          double held = 0;
          for (const auto& p : piece->parameters()) held += static_cast<double>(p.numel());
          heaviest = std::max(heaviest, held);
        }
        INFO(name << " tie " << tie << " mtp " << mtp);
        CHECK(launch::parameters_per_rank(c, 1, 2) == Approx(heaviest));
      }
    }
  }
}
