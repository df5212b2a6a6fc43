// loom generate: a model's continuation of a prompt, token by token with a KV cache
// (models/kv_cache.h), at parallel.tp = the world. Every tp rank computes its
// heads and vocabulary slice, the logits are gathered whole on every rank, and every
// rank picks the same token with the same seeded sampler; rank 0 writes the text.

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/errors.h"
#include "core/logging.h"
#include "core/tokenizer.h"
#include "launch/commands.h"
#include "launch/communicator_factory.h"
#include "launch/generation_model.h"
#include "launch/generation_sampler.h"
#include "launch/moe_metrics.h"
#include "launch/text_stream.h"
#include "launch/thread_policy.h"
#include "launch/tokenizer_record.h"
#include "models/gpt.h"
#include "models/kv_cache.h"
#include "parallel/launch_env.h"
#include "parallel/process_groups.h"

namespace loom::launch {
namespace {

// stdout carries the text and the ids alone: the logs go to stderr.
void log_to_stderr(int rank, int world) {
  init_logging(rank, world, /*to_stderr=*/true);
}

// Generation splits the model over tp only: each token is one position, nothing to pipeline or batch.
void require_tensor_parallel_only(Config& config, int64_t world) {
  auto& p = config.parallel;
  if (p.pp != 1 || p.virtual_stages != 1) {
    throw InputError("config key 'parallel.pp': loom generate runs at parallel.tp only (pp and dp 1); got pp = " +
                     std::to_string(p.pp) + ", virtual_stages = " + std::to_string(p.virtual_stages));
  }
  if (p.tp != world || (p.dp != 0 && p.dp != 1)) {
    throw InputError(
        "config key 'parallel.tp': loom generate runs at parallel.tp only (pp and dp 1), so tp must be "
        "the world size " +
        std::to_string(world) + "; got tp = " + std::to_string(p.tp) +
        (p.dp > 1 ? ", dp = " + std::to_string(p.dp) : "") + " (--set parallel.tp=" + std::to_string(world) + ")");
  }
  if (p.sequence_parallel) {
    throw InputError("config key 'parallel.sequence_parallel': loom generate runs without it (one position a step)");
  }
}

// Whether the prompt starts with BOS: a loom checkpoint's as its data's documents did (`loom prepare
// --add-bos`, recorded in the manifest); else (a Hugging Face directory, data that recorded nothing)
// where the tokenizer adds it, as transformers encodes a prompt.
bool starts_with_bos(const Tokenizer& tokenizer, const GenerationModel& model) {
  if (tokenizer.bos_id() < 0) return false;
  const auto& record = model.tokenizer_record;
  if (!model.hugging_face && record.is_object() && record.contains("add_bos") && record["add_bos"].is_boolean())
    return record["add_bos"].get<bool>();
  return tokenizer.adds_bos();
}

// The prompt's ids, each inside the model's vocabulary (an empty prompt starts from BOS, as
// transformers' generate does: the model's bos_token_id, else the tokenizer's).
std::vector<int64_t> prompt_ids(const Tokenizer& tokenizer, const std::string& prompt, int64_t vocab_size, bool bos,
                                int64_t model_bos) {
  std::vector<int64_t> ids;
  if (bos) ids.push_back(tokenizer.bos_id());
  for (int64_t id : tokenizer.encode(prompt)) ids.push_back(id);
  if (ids.empty()) {
    const int64_t start = model_bos >= 0 ? model_bos : tokenizer.bos_id();
    if (start < 0) {
      throw InputError("--prompt is empty, and neither the model nor the tokenizer '" + tokenizer.source() +
                       "' names a BOS token to start from");
    }
    ids.push_back(start);
  }
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      throw InputError("--prompt: tokenizer '" + tokenizer.source() + "' gives id " + std::to_string(id) +
                       ", outside the model's vocabulary (model.vocab_size = " + std::to_string(vocab_size) +
                       "); give the model's tokenizer with --tokenizer");
    }
  }
  return ids;
}

// --tokenizer; else the one the checkpoint's data was made with (refused when it has gone or
// changed); else a Hugging Face directory's own; else bytes.
std::string tokenizer_spec(const GenerateArgs& args, const GenerationModel& model) {
  if (!args.tokenizer.empty()) return args.tokenizer;
  if (!model.tokenizer_record.is_null()) return tokenizer_of_record(model.tokenizer_record, model.path);
  return model.tokenizer.empty() ? "byte" : model.tokenizer;
}

}  // namespace

int generate(const GenerateArgs& args) {
  using Clock = std::chrono::steady_clock;
  if (args.max_new_tokens < 1) throw InputError("--max-new-tokens must be at least 1");
  // Every check that needs no peer comes first, so a bad command fails every rank alike.
  const parallel::LaunchInfo launch = parallel::detect_launch();
  log_to_stderr(launch.rank, launch.world);
  GenerationModel model = describe_generation_model(args.model, args.overrides);
  Config& config = model.config;
  require_tensor_parallel_only(config, launch.world);
  TokenSampler sampler(SamplingOptions{args.temperature, args.top_k, args.top_p, args.seed});
  const auto tokenizer = load_tokenizer(tokenizer_spec(args, model));
  if (model.tokenizer_vocab_size > tokenizer->vocab_size()) {
    throw InputError("tokenizer '" + tokenizer->source() + "' knows " + std::to_string(tokenizer->vocab_size()) +
                     " ids, but " + model.path + " was trained on data tokenized with " +
                     std::to_string(model.tokenizer_vocab_size) + " (its manifest's tokenizer record): give that one");
  }
  const bool bos = starts_with_bos(*tokenizer, model);
  const std::vector<int64_t> prompt = prompt_ids(*tokenizer, args.prompt, config.model.vocab_size, bos, model.bos_id);
  // The model's positions bound the prompt and the new tokens together (compared without adding: a
  // --max-new-tokens near 2^63 would overflow the sum).
  const auto prompt_size = static_cast<int64_t>(prompt.size());
  const std::string limit = model.max_positions_key.empty() ? "" : " (" + model.max_positions_key + ")";
  if (prompt_size >= model.max_positions) {
    throw InputError("--prompt: it is " + std::to_string(prompt_size) + " tokens, and the model holds " +
                     std::to_string(model.max_positions) + " positions" + limit +
                     " for the prompt and the new tokens together; shorten it to at most " +
                     std::to_string(model.max_positions - 1) + " tokens");
  }
  if (args.max_new_tokens > model.max_positions - prompt_size) {
    throw InputError("--max-new-tokens " + std::to_string(args.max_new_tokens) + ": the prompt's " +
                     std::to_string(prompt_size) + " tokens and " + std::to_string(args.max_new_tokens) +
                     " new ones make more than the model's " + std::to_string(model.max_positions) + " positions" +
                     limit + "; ask for at most " + std::to_string(model.max_positions - prompt_size));
  }
  const int64_t positions = prompt_size + args.max_new_tokens;
  // A Hugging Face model is built for the positions this run needs (its rotary tables and masks
  // that long), a checkpoint at its own seq_len (its position embeddings are that long).
  if (model.hugging_face) config.model.seq_len = positions;
  config.model.dropout = 0;
  resolve_and_validate(config, launch.world);
  const torch::Device device = resolve_train_device(config.train.device, launch.local_rank, launch.local_world);
  use_device(device);

  const auto& p = config.parallel;
  parallel::RankGrid grid({p.tp, p.pp, p.dp, p.ep}, p.order);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(p.timeout_s * 1000.0));
  parallel::LaunchEnv env(timeout);
  apply_thread_policy(config, env.info());
  auto stats = std::make_shared<parallel::CommStats>();
  parallel::ProcessGroups groups(grid, env.rank(), communicator_factory(env, device, stats, timeout), stats);

  const auto start = Clock::now();
  const models::TensorParallelContext tp{&groups.tp(), /*sequence_parallel=*/false, /*rng=*/nullptr, &groups.ep()};
  models::GPT gpt(models::GPTOptions::from_config(config), tp);
  load_generation_weights(model, gpt->parallel_parameters(), groups.coords().tp, groups.tp().size());
  if (config.model.moe.has_expert_bias()) {  // the biases the router chooses with, from the model's files
    MoEMonitor(config, gpt->moe_stats()).restore_expert_bias(generation_expert_bias(model), model.path);
  }
  gpt->to(device);
  gpt->eval();
  info0("loom generate: {} ({} layers, hidden {}, vocabulary {}) at tp {}, tokenizer {}, {} prompt tokens{}",
        model.path, config.model.num_layers, config.model.hidden_size, config.model.vocab_size, p.tp,
        tokenizer->source(), prompt.size(), bos ? " (BOS first)" : "");

  torch::NoGradGuard no_grad;
  models::KVCache cache(config.model.num_layers, positions);
  const auto token_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  // The prompt in one forward (prefill), then one position per token.
  auto logits = gpt->forward_cached(torch::tensor(prompt, token_options).unsqueeze(0), cache);
  const auto decoding = Clock::now();
  const bool writes = groups.rank() == 0;
  TextStream text(*tokenizer, std::cout);
  std::vector<int64_t> generated;
  bool stopped_at_eos = false;
  bool text_cut = false;  // with --ids, an id the tokenizer cannot decode ends the text, not the run
  while (static_cast<int64_t>(generated.size()) < args.max_new_tokens) {
    // Every rank holds the same gathered logits, bit for bit, and the same generator: the same id.
    const int64_t id = sampler.next(logits[0][-1].cpu());
    generated.push_back(id);
    const bool decodable = id < tokenizer->vocab_size();  // else decoding would print nothing, or garbage
    if (!decodable && !args.ids) {
      throw InputError("the model generated id " + std::to_string(id) + ", which tokenizer '" + tokenizer->source() +
                       "' (" + std::to_string(tokenizer->vocab_size()) +
                       " ids) cannot decode; give the tokenizer the model was trained with (--tokenizer)");
    }
    // A Hugging Face model that names no end-of-sequence id runs on, as generate does: the
    // tokenizer's (the byte tokenizer's 256 where the directory has none) is not the model's.
    const bool stop = model.stop_ids.empty()
                          ? !model.from_hugging_face_source && id == tokenizer->eos_id()
                          : std::find(model.stop_ids.begin(), model.stop_ids.end(), id) != model.stop_ids.end();
    if (stop) {
      stopped_at_eos = true;  // as Hugging Face's generate does; the EOS is in the ids, not the text
      break;
    }
    if (!decodable && !text_cut) {
      text_cut = true;
      warn0(
          "the model generated id {}, which tokenizer '{}' ({} ids) cannot decode: the text stops there, the ids "
          "line has them all (--tokenizer gives the one the model was trained with)",
          id, tokenizer->source(), tokenizer->vocab_size());
    }
    if (writes && !text_cut) text.add(id);
    if (static_cast<int64_t>(generated.size()) < args.max_new_tokens) {
      logits = gpt->forward_cached(torch::tensor({id}, token_options).unsqueeze(0), cache);
    }
  }
  if (writes) {
    text.finish();
    std::cout << "\n";
    if (args.ids) std::cout << nlohmann::json(generated).dump() << "\n";
    std::cout.flush();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - decoding).count();
  info0("{} tokens{} in {:.2f} s after the prompt ({:.1f} tokens/s; load and prefill {:.2f} s)", generated.size(),
        stopped_at_eos ? " (stopped at the end-of-sequence token)" : "", seconds,
        static_cast<double>(generated.size()) / std::max(seconds, 1e-9),
        std::chrono::duration<double>(decoding - start).count());
  groups.world_comm().barrier().wait();
  return 0;
}

}  // namespace loom::launch
