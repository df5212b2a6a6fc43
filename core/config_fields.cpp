#include "core/config_fields.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <type_traits>

namespace loom {
namespace {

bool parse_int(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') {
    // Accept integral floats written as 1e3.
    double d = std::strtod(text.c_str(), &end);
    if (*end != '\0' || d != std::floor(d) || std::fabs(d) > 9e15) return false;
    value = static_cast<long long>(d);
  }
  out = value;
  return true;
}

bool parse_float(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value)) return false;
  out = value;
  return true;
}

// YAML 1.1's words as PyYAML reads them (Megatron-LM's and Hugging Face's configs are read so): each
// in lower case, capitalised or upper case; and 1 or 0.
bool parse_bool(const std::string& text, bool& out) {
  static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "1"};
  static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "0"};
  if (yes.count(text)) {
    out = true;
  } else if (no.count(text)) {
    out = false;
  } else {
    return false;
  }
  return true;
}

// The shortest text (of at least 6 digits, so 300 is not 3e+02) that reads back to V exactly:
// 0.1 rather than 0.10000000000000001.
std::string print_float(double v) {
  for (int digits = 6;; ++digits) {
    std::ostringstream s;
    s.precision(digits);
    s << v;
    if (digits >= 17 || std::strtod(s.str().c_str(), nullptr) == v) return s.str();
  }
}

template <typename Member>
ConfigField int_field(std::string section, std::string key, Member member, std::string help) {
  return {section,
          key,
          "int",
          help,
          [member](Config& c, const std::string& t) { return parse_int(t, member(c)); },
          [member](const Config& c) { return std::to_string(member(c)); }};
}

template <typename Member>
ConfigField float_field(std::string section, std::string key, Member member, std::string help) {
  return {section,
          key,
          "float",
          help,
          [member](Config& c, const std::string& t) { return parse_float(t, member(c)); },
          [member](const Config& c) { return print_float(member(c)); }};
}

template <typename Member>
ConfigField bool_field(std::string section, std::string key, Member member, std::string help) {
  return {section,
          key,
          "bool",
          help,
          [member](Config& c, const std::string& t) { return parse_bool(t, member(c)); },
          [member](const Config& c) { return std::string(member(c) ? "true" : "false"); }};
}

// A comma-separated list of integers ("1,3"; a YAML sequence [1, 3] arrives joined so); empty: none.
bool parse_int_list(const std::string& text, std::vector<int64_t>& out) {
  std::vector<int64_t> values;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    const auto first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    if (first == std::string::npos) return false;
    int64_t v = 0;
    if (!parse_int(item.substr(first, last - first + 1), v)) return false;
    values.push_back(v);
  }
  if (!text.empty() && text.back() == ',') return false;
  out = values;
  return true;
}

std::string print_int_list(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

template <typename Member>
ConfigField int_list_field(std::string section, std::string key, Member member, std::string help) {
  return {section,
          key,
          "list of ints",
          help,
          [member](Config& c, const std::string& t) { return parse_int_list(t, member(c)); },
          [member](const Config& c) { return print_int_list(member(c)); }};
}

template <typename Member>
ConfigField string_field(std::string section, std::string key, Member member, std::string help) {
  return {section,
          key,
          "string",
          help,
          [member](Config& c, const std::string& t) {
            member(c) = t;
            return true;
          },
          [member](const Config& c) { return member(c); }};
}

// A key with a few named values: typed "string" (as the key table and the YAML dump
// have always shown it); a value outside them throws the InputError of from_string.
template <typename Member>
ConfigField enum_field(std::string section, std::string key, Member member, std::string help) {
  auto parse = [member](Config& c, const std::string& t) {
    auto& field = member(c);
    field = from_string<std::decay_t<decltype(field)>>(t);
    return true;
  };
  return {section, key, "string", help, parse, [member](const Config& c) { return to_string(member(c)); }};
}

#define LOOM_MEMBER(path) \
  [](auto& c) -> auto& {  \
    return c.path;        \
  }

std::vector<ConfigField> make_fields() {
  return {
      enum_field("model", "arch", LOOM_MEMBER(model.arch),
                 "gpt2 or llama: the defaults of norm, activation, position, bias, qkv_bias and tie_embeddings"),
      int_field("model", "num_layers", LOOM_MEMBER(model.num_layers), "transformer blocks"),
      int_field("model", "hidden_size", LOOM_MEMBER(model.hidden_size), "width of the residual stream"),
      int_field("model", "num_heads", LOOM_MEMBER(model.num_heads),
                "attention heads (divides hidden_size; divisible by parallel.tp)"),
      int_field("model", "num_kv_heads", LOOM_MEMBER(model.num_kv_heads),
                "key/value heads (grouped-query attention; divides num_heads); 0: num_heads"),
      int_field(
          "model", "ffn_hidden_size", LOOM_MEMBER(model.ffn_hidden_size),
          "inner width of the MLP; 0: 4 x hidden_size (gelu), 8/3 x hidden_size up to a multiple of 256 (swiglu)"),
      enum_field("model", "norm", LOOM_MEMBER(model.norm), "layernorm or rmsnorm (default from arch)"),
      float_field("model", "norm_eps", LOOM_MEMBER(model.norm_eps), "epsilon of the norms"),
      enum_field("model", "activation", LOOM_MEMBER(model.activation),
                 "MLP: gelu (fc, gelu, proj) or swiglu (silu(gate) * up, proj) (default from arch)"),
      enum_field("model", "position", LOOM_MEMBER(model.position),
                 "learned (absolute embeddings) or rope (rotary, rotate-half) (default from arch)"),
      float_field("model", "rope_theta", LOOM_MEMBER(model.rope_theta), "base of the rotary frequencies"),
      enum_field("model", "rope_scaling.type", LOOM_MEMBER(model.rope_scaling.type),
                 "none, llama3 (Llama 3.1's rescaled frequencies) or yarn (YaRN: DeepSeek-V3, Qwen3)"),
      float_field("model", "rope_scaling.factor", LOOM_MEMBER(model.rope_scaling.factor),
                  "llama3: low frequencies are divided by this"),
      float_field("model", "rope_scaling.low_freq_factor", LOOM_MEMBER(model.rope_scaling.low_freq_factor),
                  "llama3: wavelengths above original / this are scaled"),
      float_field("model", "rope_scaling.high_freq_factor", LOOM_MEMBER(model.rope_scaling.high_freq_factor),
                  "llama3: wavelengths below original / this are kept"),
      int_field("model", "rope_scaling.original_max_position_embeddings",
                LOOM_MEMBER(model.rope_scaling.original_max_position_embeddings),
                "llama3, yarn: the context length the model was first trained at"),
      float_field("model", "rope_scaling.beta_fast", LOOM_MEMBER(model.rope_scaling.beta_fast),
                  "yarn: frequencies turning more often than this over the original context are kept"),
      float_field("model", "rope_scaling.beta_slow", LOOM_MEMBER(model.rope_scaling.beta_slow),
                  "yarn: frequencies turning less often than this over the original context are divided by factor"),
      float_field("model", "rope_scaling.mscale", LOOM_MEMBER(model.rope_scaling.mscale),
                  "yarn: the attention factor's numerator 0.1 mscale ln(factor) + 1 (0: as 1, with mscale_all_dim 0)"),
      float_field("model", "rope_scaling.mscale_all_dim", LOOM_MEMBER(model.rope_scaling.mscale_all_dim),
                  "yarn: the attention factor's denominator 0.1 mscale_all_dim ln(factor) + 1; yarn and llama3: "
                  "latent attention's softmax scale times its square; 0: none"),
      float_field("model", "rope_scaling.attention_factor", LOOM_MEMBER(model.rope_scaling.attention_factor),
                  "yarn: cos and sin times this; 0: derived from factor, mscale and mscale_all_dim"),
      bool_field("model", "rope_interleave", LOOM_MEMBER(model.rope_interleave),
                 "rotate features in adjacent pairs (DeepSeek) rather than i with i + d/2 (rotate-half)"),
      int_field("model", "mla.kv_lora_rank", LOOM_MEMBER(model.mla.kv_lora_rank),
                "multi-head latent attention (DeepSeek-V3): the keys' and values' latent width; 0: off"),
      int_field("model", "mla.q_lora_rank", LOOM_MEMBER(model.mla.q_lora_rank),
                "latent attention: the queries' latent width; 0: queries projected from the hidden state"),
      int_field("model", "mla.qk_nope_head_dim", LOOM_MEMBER(model.mla.qk_nope_head_dim),
                "latent attention: each head's query and key features without position"),
      int_field("model", "mla.qk_rope_head_dim", LOOM_MEMBER(model.mla.qk_rope_head_dim),
                "latent attention: each head's rotated query and key features (the key's shared by the heads)"),
      int_field("model", "mla.v_head_dim", LOOM_MEMBER(model.mla.v_head_dim),
                "latent attention: each head's value width"),
      bool_field("model", "bias", LOOM_MEMBER(model.bias), "biases in the linear layers (default from arch)"),
      int_field("model", "head_dim", LOOM_MEMBER(model.attention_head_dim),
                "each attention head's width (Qwen3); 0: hidden_size / num_heads"),
      bool_field("model", "qk_norm", LOOM_MEMBER(model.qk_norm),
                 "RMS-normalise each head's query and key before the rotary embedding (Qwen3)"),
      bool_field("model", "qkv_bias", LOOM_MEMBER(model.qkv_bias),
                 "biases in the query, key and value projections (default: model.bias)"),
      bool_field("model", "tie_embeddings", LOOM_MEMBER(model.tie_embeddings),
                 "the output layer is the word embedding (default from arch)"),
      int_field("model", "vocab_size", LOOM_MEMBER(model.vocab_size), "token ids the model embeds and predicts"),
      int_field("model", "seq_len", LOOM_MEMBER(model.seq_len), "tokens per sample (the context length)"),
      float_field("model", "dropout", LOOM_MEMBER(model.dropout), "dropout probability; 0: off"),
      string_field("model", "init_from", LOOM_MEMBER(model.init_from),
                   "Hugging Face model directory (config.json, safetensors) or GPT-2 .safetensors file to start from; "
                   "empty: random init"),
      int_field("model", "mtp.depth", LOOM_MEMBER(model.mtp.depth),
                "multi-token prediction (DeepSeek-V3): modules on the last stage, module k predicting token "
                "i + k + 1; 0: none"),
      float_field("model", "mtp.loss_weight", LOOM_MEMBER(model.mtp.loss_weight),
                  "multi-token prediction: the mean of the modules' losses times this joins the training loss"),
      int_field("model", "moe.num_experts", LOOM_MEMBER(model.moe.num_experts),
                "experts per MoE layer; 0: dense MLPs everywhere"),
      int_field("model", "moe.top_k", LOOM_MEMBER(model.moe.top_k), "experts each token is routed to"),
      int_field("model", "moe.every", LOOM_MEMBER(model.moe.every),
                "the MLP of every n-th block (0, n, 2n, ...) is an MoE layer"),
      float_field("model", "moe.capacity_factor", LOOM_MEMBER(model.moe.capacity_factor),
                  "tokens an expert takes, as a multiple of its even share; 0: none dropped"),
      float_field("model", "moe.aux_loss_coeff", LOOM_MEMBER(model.moe.aux_loss_coeff),
                  "weight of the load-balancing loss (Switch/GShard)"),
      string_field("model", "moe.aux_loss_type", LOOM_MEMBER(model.moe.aux_loss_type),
                   "the load-balancing loss over each micro-batch's tokens (batch), each sequence's "
                   "(sequence, DeepSeek-V3), or none"),
      float_field("model", "moe.z_loss_coeff", LOOM_MEMBER(model.moe.z_loss_coeff),
                  "weight of the router z-loss (ST-MoE)"),
      float_field("model", "moe.router_jitter", LOOM_MEMBER(model.moe.router_jitter),
                  "multiplicative noise on the router input, uniform in [1 - j, 1 + j]; 0: none"),
      string_field("model", "moe.score", LOOM_MEMBER(model.moe.score),
                   "router scores: softmax over the experts, or sigmoid per expert (DeepSeek-V3)"),
      bool_field("model", "moe.norm_topk_prob", LOOM_MEMBER(model.moe.norm_topk_prob),
                 "renormalise the chosen experts' weights to sum to one (top_k > 1: a single choice keeps its score)"),
      float_field("model", "moe.routed_scaling_factor", LOOM_MEMBER(model.moe.routed_scaling_factor),
                  "the routed experts' output times this"),
      int_field("model", "moe.n_group", LOOM_MEMBER(model.moe.n_group),
                "group-limited routing: the experts in this many groups (1: off)"),
      int_field("model", "moe.topk_group", LOOM_MEMBER(model.moe.topk_group),
                "group-limited routing: only the experts of this many best groups are eligible"),
      float_field("model", "moe.bias_update_rate", LOOM_MEMBER(model.moe.bias_update_rate),
                  "auxiliary-loss-free balancing: each step every expert's choosing bias moves by this "
                  "times sign(mean load - its load); 0: no bias"),
      bool_field("model", "moe.expert_bias", LOOM_MEMBER(model.moe.expert_bias),
                 "each expert has a bias for choosing (DeepSeek-V3's e_score_correction_bias) even at "
                 "bias_update_rate 0 (then fixed); implied by a rate above 0"),
      int_field("model", "moe.moe_intermediate_size", LOOM_MEMBER(model.moe.moe_intermediate_size),
                "each expert's MLP width; 0: model.ffn_hidden_size"),
      int_field("model", "moe.n_shared_experts", LOOM_MEMBER(model.moe.n_shared_experts),
                "shared experts (DeepSeek-V3): a dense MLP of this many times the experts' width that every "
                "token passes through beside the routed ones; 0: none"),
      int_field("model", "moe.first_k_dense_replace", LOOM_MEMBER(model.moe.first_k_dense_replace),
                "the first k blocks keep a dense MLP (DeepSeek-V3)"),
      int_field("model", "moe.decoder_sparse_step", LOOM_MEMBER(model.moe.decoder_sparse_step),
                "only blocks with (layer + 1) % step == 0 have experts (Qwen3-MoE)"),
      int_list_field("model", "moe.mlp_only_layers", LOOM_MEMBER(model.moe.mlp_only_layers),
                     "blocks (0-based, comma-separated) that keep a dense MLP (Qwen3-MoE)"),

      int_field("parallel", "tp", LOOM_MEMBER(parallel.tp), "tensor-parallel size"),
      int_field("parallel", "pp", LOOM_MEMBER(parallel.pp), "pipeline-parallel size (stages)"),
      int_field("parallel", "cp", LOOM_MEMBER(parallel.cp),
                "context-parallel size: each sequence split over cp ranks (model.seq_len a multiple of 2 cp)"),
      enum_field("parallel", "cp_comm", LOOM_MEMBER(parallel.cp_comm),
                 "context-parallel attention: p2p (ring attention) or a2a (all-to-all over heads)"),
      int_field("parallel", "dp", LOOM_MEMBER(parallel.dp), "data-parallel size; 0: world / (tp x cp x pp)"),
      int_field("parallel", "ep", LOOM_MEMBER(parallel.ep),
                "expert-parallel size (divides dp and model.moe.num_experts)"),
      int_field("parallel", "expert_tp", LOOM_MEMBER(parallel.expert_tp),
                "experts' tensor-parallel size: 1 (each expert whole on every tp rank) or parallel.tp (each "
                "expert's width split over tp)"),
      bool_field("parallel", "sequence_parallel", LOOM_MEMBER(parallel.sequence_parallel),
                 "shard activations along the sequence outside tp regions (needs tp > 1)"),
      int_field("parallel", "virtual_stages", LOOM_MEMBER(parallel.virtual_stages),
                "model chunks per pipeline stage (the interleaved schedule)"),
      enum_field(
          "parallel", "schedule", LOOM_MEMBER(parallel.schedule),
          "pipeline schedule: gpipe, 1f1b, interleaved or zb-h1 (zero bubble: weight gradients fill the bubbles)"),
      int_field("parallel", "zero_stage", LOOM_MEMBER(parallel.zero_stage),
                "ZeRO: 0 off, 1 optimizer state, 2 also gradients, 3 also parameters (FSDP)"),
      int_field("parallel", "dp_shard", LOOM_MEMBER(parallel.dp_shard),
                "HSDP: ZeRO shards inside groups of this many dp ranks (normally a node's) and replicates across "
                "them; 0: all of dp"),
      string_field("parallel", "order", LOOM_MEMBER(parallel.order),
                   "order of the rank grid's dimensions, fastest first"),
      int_field("parallel", "ranks_per_node", LOOM_MEMBER(parallel.ranks_per_node),
                "ranks that share a node (consecutive ranks); 0: from the launcher's local world size and the "
                "host names"),
      enum_field("parallel", "dp_collectives", LOOM_MEMBER(parallel.dp_collectives),
                 "the data-parallel gradient all-reduce: flat (one ring) or hierarchical (inside each node, then "
                 "one share per rank across nodes)"),
      enum_field("parallel", "grad_compression", LOOM_MEMBER(parallel.grad_compression),
                 "the data-parallel gradient all-reduce compressed: none, bf16, int8 (block absmax) or powersgd "
                 "(ZeRO 0 and 1)"),
      bool_field("parallel", "grad_compression_error_feedback", LOOM_MEMBER(parallel.grad_compression_error_feedback),
                 "add what compression lost to the next step's gradient"),
      int_field("parallel", "powersgd.rank", LOOM_MEMBER(parallel.powersgd.rank),
                "PowerSGD: the rank of each matrix's approximation"),
      int_field("parallel", "powersgd.start_step", LOOM_MEMBER(parallel.powersgd.start_step),
                "PowerSGD: plain all-reduces for this many steps first (PyTorch's start_powerSGD_iter)"),
      enum_field("parallel", "backend", LOOM_MEMBER(parallel.backend), "communicator: auto, gloo (CPU) or nccl (GPU)"),
      float_field("parallel", "timeout_s", LOOM_MEMBER(parallel.timeout_s), "seconds after which any collective fails"),
      float_field("parallel", "bucket_mb", LOOM_MEMBER(parallel.bucket_mb),
                  "size of the data-parallel gradient buckets in MB; 0: one bucket"),
      enum_field("parallel", "grad_reduce_dtype", LOOM_MEMBER(parallel.grad_reduce_dtype),
                 "dtype gradients are reduced in over dp: fp32 or bf16"),

      int_field("train", "steps", LOOM_MEMBER(train.steps), "optimizer steps"),
      int_field("train", "global_batch_size", LOOM_MEMBER(train.global_batch_size),
                "samples per step: micro batch x accumulation steps x dp"),
      int_field("train", "micro_batch_size", LOOM_MEMBER(train.micro_batch_size),
                "samples per forward and backward pass on one rank"),
      float_field("train", "lr", LOOM_MEMBER(train.lr), "peak learning rate, reached after warm-up"),
      float_field("train", "min_lr", LOOM_MEMBER(train.min_lr), "learning rate at the end of the cosine decay"),
      int_field("train", "warmup_steps", LOOM_MEMBER(train.warmup_steps), "steps of linear learning-rate warm-up"),
      enum_field("train", "lr_decay_style", LOOM_MEMBER(train.lr_decay_style),
                 "after warm-up: cosine or linear to min_lr, constant at lr, or wsd (warm-up, stable, decay: lr "
                 "until the last lr_wsd_decay_steps, then linear to min_lr)"),
      int_field("train", "lr_decay_steps", LOOM_MEMBER(train.lr_decay_steps),
                "steps the decay takes after warm-up, then min_lr (0: steps - warmup_steps); set it to extend a "
                "run with train.steps without stretching its schedule"),
      int_field("train", "lr_wsd_decay_steps", LOOM_MEMBER(train.lr_wsd_decay_steps),
                "wsd: the last steps of the decay, annealing linearly from lr to min_lr"),
      float_field("train", "weight_decay", LOOM_MEMBER(train.weight_decay), "AdamW's decoupled weight decay"),
      float_field("train", "grad_clip", LOOM_MEMBER(train.grad_clip), "clip the global gradient norm to this; 0: off"),
      float_field("train", "adam_beta1", LOOM_MEMBER(train.adam_beta1), "AdamW's first-moment decay"),
      float_field("train", "adam_beta2", LOOM_MEMBER(train.adam_beta2), "AdamW's second-moment decay"),
      float_field("train", "adam_eps", LOOM_MEMBER(train.adam_eps), "AdamW's epsilon"),
      int_field("train", "seed", LOOM_MEMBER(train.seed), "seed of the initialisation, dropout and data order"),
      enum_field("train", "precision", LOOM_MEMBER(train.precision),
                 "fp32, bf16 or fp16 (fp32 master weights and optimizer state)"),
      float_field("train", "loss_scale", LOOM_MEMBER(train.loss_scale), "fp16 loss scale; 0: dynamic"),
      float_field("train", "initial_loss_scale", LOOM_MEMBER(train.initial_loss_scale),
                  "fp16 dynamic loss scale at the start"),
      int_field("train", "loss_scale_window", LOOM_MEMBER(train.loss_scale_window),
                "steps without an overflow before the dynamic loss scale doubles"),
      float_field("train", "min_loss_scale", LOOM_MEMBER(train.min_loss_scale),
                  "the dynamic loss scale never goes below this"),
      enum_field("train", "optimizer", LOOM_MEMBER(train.optimizer),
                 "adamw, or muon (orthogonalised momentum for the blocks' 2-D weights, AdamW for the rest)"),
      float_field("train", "muon.lr", LOOM_MEMBER(train.muon.lr),
                  "the Muon group's peak learning rate; 0: train.lr (both follow the schedule's shape)"),
      float_field("train", "muon.weight_decay", LOOM_MEMBER(train.muon.weight_decay),
                  "the Muon group's weight decay; -1: train.weight_decay"),
      float_field("train", "muon.momentum", LOOM_MEMBER(train.muon.momentum), "Muon's momentum"),
      bool_field("train", "muon.nesterov", LOOM_MEMBER(train.muon.nesterov), "Nesterov momentum for Muon"),
      int_field("train", "muon.ns_steps", LOOM_MEMBER(train.muon.ns_steps), "Newton-Schulz iterations per update"),
      string_field("train", "muon.ns_dtype", LOOM_MEMBER(train.muon.ns_dtype),
                   "the Newton-Schulz iteration's dtype: fp32, or bf16 (faster on GPUs, coarser)"),
      string_field("train", "muon.include", LOOM_MEMBER(train.muon.include),
                   "comma-separated name patterns (* any characters) of more matrices for Muon, e.g. lm_head"),
      string_field(
          "train", "muon.exclude", LOOM_MEMBER(train.muon.exclude),
          "comma-separated name patterns of block matrices that AdamW trains instead, e.g. h.*.attn.proj.weight"),
      int_field("train", "threads_per_rank", LOOM_MEMBER(train.threads_per_rank),
                "threads per rank (LibTorch's and MKL's pool, and loom's kernels); 0: cores / local ranks"),
      float_field("train", "peak_tflops", LOOM_MEMBER(train.peak_tflops),
                  "one device's dense peak TFLOP/s for the MFU line; 0: a known GPU's bf16 peak"),
      enum_field("train", "device", LOOM_MEMBER(train.device),
                 "auto (cuda when LibTorch sees a GPU, else cpu), cpu, or cuda (a GPU per local rank)"),
      int_field("train", "exit_after", LOOM_MEMBER(train.exit_after),
                "save and exit after this step (the schedule still spans train.steps); -1: never"),
      float_field("train", "exit_duration_mins", LOOM_MEMBER(train.exit_duration_mins),
                  "save and exit after the first step ending this many minutes into the job; 0: never"),
      int_field("train", "max_skipped_steps", LOOM_MEMBER(train.max_skipped_steps),
                "stop (exit 3) after this many steps in a row skipped for a non-finite loss or gradient norm"),
      bool_field("train", "memory_check", LOOM_MEMBER(train.memory_check),
                 "refuse a layout whose estimated memory exceeds the machine's (false: train anyway)"),
      float_field("train", "step_timeout_s", LOOM_MEMBER(train.step_timeout_s),
                  "end the job (exit 1) when a step makes no progress for this long (at least 1); 0: automatic, "
                  "from parallel.timeout_s and the slowest step so far"),
      enum_field("train", "recompute", LOOM_MEMBER(train.recompute),
                 "activation recomputation: none, full or selective"),

      string_field("data", "path", LOOM_MEMBER(data.path),
                   "PREFIX of an indexed dataset (PREFIX.bin, PREFIX.idx); empty: built-in synthetic corpus"),
      enum_field("data", "order", LOOM_MEMBER(data.order), "sample order: sequential or shuffled"),
      string_field("data", "valid_path", LOOM_MEMBER(data.valid_path),
                   "validation data: a PREFIX or a blend \"W1 PREFIX1 W2 PREFIX2\"; empty: none (or data.split)"),
      string_field("data", "split", LOOM_MEMBER(data.split),
                   "\"TRAIN,VALID,TEST\" weights cutting each training dataset (e.g. 969,30,1); empty: no cut"),
      bool_field("data", "eod_mask_loss", LOOM_MEMBER(data.eod_mask_loss),
                 "no loss on the token after an end-of-document token (Megatron-LM's --eod-mask-loss); the mean "
                 "is over the targets left"),
      int_field("data", "eod_id", LOOM_MEMBER(data.eod_id),
                "the end-of-document id data.eod_mask_loss masks after; -1: the datasets' sidecars' eos_id"),

      int_field("eval", "interval", LOOM_MEMBER(eval.interval),
                "steps between validation losses (and one at the last step); 0: only at the last step"),
      int_field("eval", "steps", LOOM_MEMBER(eval.steps), "global batches of validation data per evaluation"),

      string_field("checkpoint", "dir", LOOM_MEMBER(checkpoint.dir),
                   "directory checkpoints are saved in and resumed from; empty: none"),
      int_field("checkpoint", "interval", LOOM_MEMBER(checkpoint.interval),
                "save every this many steps; 0: none between (with checkpoint.dir the last step is always "
                "saved, and on train.exit_after or a signal)"),
      int_field("checkpoint", "keep", LOOM_MEMBER(checkpoint.keep),
                "newest checkpoints kept (and the newest verified one); older ones are removed"),
      bool_field("checkpoint", "async", LOOM_MEMBER(checkpoint.async),
                 "write checkpoints from a background thread while training goes on (a host copy of the state)"),
      float_field("checkpoint", "timeout_s", LOOM_MEMBER(checkpoint.timeout_s),
                  "seconds a rank waits on another rank's checkpoint files (written, or checked before a resume) "
                  "before the job fails; a rank that stops answering while it saves is found within "
                  "parallel.timeout_s, which bounds every other wait"),

      int_field("log", "interval", LOOM_MEMBER(log.interval), "steps between progress lines"),
      bool_field("log", "trace", LOOM_MEMBER(log.trace),
                 "write RUN_DIR/trace_rankR.json: the last step's gradient-bucket events"),
      bool_field("log", "tensorboard", LOOM_MEMBER(log.tensorboard),
                 "also write metrics.jsonl's scalars as TensorBoard event files under RUN_DIR/tensorboard"),
      int_field("log", "profile_step_start", LOOM_MEMBER(log.profile_step_start),
                "profile rank 0 from this step with LibTorch's profiler (0: off): the Chrome trace in "
                "RUN_DIR/profile_rank0.json, and on a GPU the kernels that took the most time in the log"),
      int_field("log", "profile_step_end", LOOM_MEMBER(log.profile_step_end),
                "the last profiled step (inclusive; 0: log.profile_step_start alone)"),
      string_field("log", "cluster", LOOM_MEMBER(log.cluster),
                   "a cluster file (configs/clusters/): the run's closing diagnosis sets its measured step split "
                   "and collectives beside loom plan's prediction for this layout on that cluster, as loom "
                   "diagnose --cluster does (read at start-up: a wrong file stops the run before step 1)"),
  };
}

#undef LOOM_MEMBER

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> fields = make_fields();
  return fields;
}

std::string config_keys_help() {
  const Config defaults;
  std::vector<std::string> shown;
  size_t name_width = 3, type_width = 4, default_width = 7;
  for (const auto& f : config_fields()) {
    const std::string value = f.print(defaults);
    shown.push_back(value.empty() ? "\"\"" : value);
    name_width = std::max(name_width, f.name().size());
    type_width = std::max(type_width, f.type.size());
    default_width = std::max(default_width, shown.back().size());
  }
  std::ostringstream out;
  auto row = [&](const std::string& name, const std::string& type, const std::string& value, const std::string& help) {
    out << "  " << name << std::string(name_width + 2 - name.size(), ' ') << type
        << std::string(type_width + 2 - type.size(), ' ') << value << std::string(default_width + 2 - value.size(), ' ')
        << help << "\n";
  };
  out << "Config keys (in CONFIG.yaml as section: {key: value}, or --set section.key=value):\n";
  row("key", "type", "default", "meaning");
  for (size_t i = 0; i < config_fields().size(); ++i) {
    const ConfigField& f = config_fields()[i];
    row(f.name(), f.type, shown[i], f.help);
  }
  return out.str();
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = static_cast<size_t>(-1);
  for (const auto& candidate : candidates) {
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace loom
