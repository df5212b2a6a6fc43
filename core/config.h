// Typed configuration of a loom job, read from YAML with command-line overrides.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/config_enums.h"

namespace loom {

// Mixture of Experts: the MLP of every `every`-th block (layers 0, every, 2 every, ...)
// becomes num_experts expert MLPs behind a top-k router.
struct MoEConfig {
  int64_t num_experts = 0;  // 0: dense MLPs everywhere
  int64_t top_k = 2;
  int64_t every = 1;
  double capacity_factor = 0.0;  // 0: no token is dropped
  double aux_loss_coeff = 0.01;  // Switch/GShard load-balancing loss
  // Over what the load-balancing loss counts loads: each micro-batch's tokens together (batch,
  // Switch/GShard), each sequence's own, averaged over the sequences (sequence, DeepSeek-V3's
  // complementary sequence-wise loss), or no loss at all (none).
  std::string aux_loss_type = "batch";
  double z_loss_coeff = 0.001;  // router z-loss (ST-MoE)
  double router_jitter = 0.0;   // multiplicative noise on the router input, uniform in [1 - j, 1 + j]
  // The router of models/moe.h: scores by softmax over the experts or each expert's sigmoid
  // (DeepSeek-V3); the chosen experts' weights renormalised to sum to one (top-k > 1); the routed
  // output scaled; group-limited routing (experts in N_GROUP groups, each scored by its best two
  // experts, only the TOPK_GROUP best groups' experts eligible).
  std::string score = "softmax";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  // DeepSeek-V3's auxiliary-loss-free balancing: each expert has a bias added to its score for
  // choosing only, moved after every step by this rate times sign(mean load - its load) (0: none).
  double bias_update_rate = 0.0;
  // Each expert has that bias even without updates (a DeepSeek-V3 checkpoint's e_score_correction_bias,
  // fixed when fine-tuning at rate 0); implied by bias_update_rate > 0.
  bool expert_bias = false;
  bool has_expert_bias() const { return expert_bias || bias_update_rate > 0; }
  // The experts' width (SwiGLU or GELU, as model.activation); 0: model.ffn_hidden_size.
  int64_t moe_intermediate_size = 0;
  // Shared experts (DeepSeek-V3): one dense MLP of n_shared_experts x the experts' width that every
  // token of an MoE layer passes through beside the routed experts, tensor parallel like the dense MLP.
  int64_t n_shared_experts = 0;
  // Which blocks have experts (Hugging Face's names): none of the first first_k_dense_replace
  // (DeepSeek-V3), only those with (layer + 1) % decoder_sparse_step == 0 and none listed in
  // mlp_only_layers (Qwen3-MoE), besides `every` above; the others keep the dense MLP of
  // model.ffn_hidden_size.
  int64_t first_k_dense_replace = 0;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool enabled() const { return num_experts > 0; }
};

// Whether block LAYER of a model with MOE has experts (the rest have the dense MLP).
inline bool moe_block(const MoEConfig& moe, int64_t layer) {
  if (!moe.enabled() || layer < moe.first_k_dense_replace) return false;
  if (layer % moe.every != 0 || (layer + 1) % moe.decoder_sparse_step != 0) return false;
  for (int64_t dense : moe.mlp_only_layers) {
    if (dense == layer) return false;
  }
  return true;
}

// Llama 3's rescaling of the rotary frequencies for long contexts (Hugging Face's rope_type "llama3"):
// wavelengths below original_max_position_embeddings / high_freq_factor are kept, those above
// original_max_position_embeddings / low_freq_factor divided by factor, those between blended.
//
// YaRN (rope_type "yarn", Peng et al.; DeepSeek-V3, Qwen3's long contexts): the frequencies that
// turn fewer than beta_slow times over original_max_position_embeddings divided by factor, those
// turning more than beta_fast times kept, a linear ramp between (over the rounded correction
// range); cos and sin times the attention factor (attention_factor, or 0: from mscale and
// mscale_all_dim as transformers derives it). Multi-head latent attention also multiplies its
// softmax scale by (0.1 mscale_all_dim ln(factor) + 1)^2, as DeepSeek's release does.
struct RopeScalingConfig {
  RopeScalingKind type = RopeScalingKind::none;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double attention_factor = 0.0;
};

// DeepSeek's multi-head latent attention (MLA; kv_lora_rank > 0): each token's keys and values for
// every head made from one latent of kv_lora_rank features, its queries from one of q_lora_rank (0:
// from the hidden state directly); each head's query and key a part without position
// (qk_nope_head_dim) and a rotated part (qk_rope_head_dim, the key's one for all heads), its value
// v_head_dim wide.
struct MlaConfig {
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;  // 0: no latent attention
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// DeepSeek-V3's multi-token prediction: DEPTH modules on the last pipeline stage, module k predicting
// token i + k + 1 from module k - 1's hidden state at i (the main model's final normed one for k = 1)
// and the embedding of token i + k, through one transformer block and the main output layer; the
// mean of their losses times LOSS_WEIGHT joins the training loss (metrics.jsonl's loss stays the
// main one; mtp_loss is that mean before the weight).
struct MtpConfig {
  int64_t depth = 0;  // 0: none
  double loss_weight = 0.1;
};

// model.arch sets the defaults of the keys below it that a config leaves unset
// (resolve_model_defaults): GPT-2 (LayerNorm, GELU, learned positions, biases, tied
// output) or Llama (RMSNorm, SwiGLU, RoPE, no biases, untied output).
struct ModelConfig {
  ModelArch arch = ModelArch::gpt2;
  NormKind norm = NormKind::layernorm;
  double norm_eps = 1e-5;
  Activation activation = Activation::gelu;
  PositionKind position = PositionKind::learned;
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling;
  // The rotated features taken in pairs (x0, x1), (x2, x3), ... (DeepSeek's layout), not rotate-half's (x_i, x_i+d/2).
  bool rope_interleave = false;
  MlaConfig mla;
  MtpConfig mtp;
  int64_t num_kv_heads = 0;  // grouped-query attention; 0: num_heads (multi-head attention)
  // Each head's width (Qwen3's head_dim, which need not be hidden_size / num_heads); 0: hidden_size / num_heads.
  int64_t attention_head_dim = 0;
  // Qwen3's q/k norms: each head's query and key RMS-normalised (a weight of head_dim each) before RoPE.
  bool qk_norm = false;
  bool bias = true;      // biases of the linear layers
  bool qkv_bias = true;  // biases of the query, key and value projections (Qwen2 has them, Llama not)
  bool tie_embeddings = true;
  int64_t num_layers = 2;
  int64_t hidden_size = 64;
  int64_t num_heads = 4;
  int64_t ffn_hidden_size = 0;  // 0: 4 * hidden_size
  int64_t vocab_size = 256;
  int64_t seq_len = 64;
  double dropout = 0.0;
  // A Hugging Face model directory (config.json and safetensors) or a GPT-2 .safetensors file to start from.
  std::string init_from;
  MoEConfig moe;

  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  // Each head's query and key width (under latent attention its part without position and its rotated one).
  int64_t head_dim() const {
    if (mla.enabled()) return mla.qk_head_dim();
    return attention_head_dim > 0 ? attention_head_dim : hidden_size / num_heads;
  }
};

// PowerSGD's settings (parallel.grad_compression: powersgd), PyTorch's hook's defaults.
struct PowerSgdConfig {
  int64_t rank = 1;           // the rank r of each matrix's approximation P Q^T
  int64_t start_step = 1000;  // plain all-reduces for this many steps first (PyTorch's start_powerSGD_iter)
};

struct ParallelConfig {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 0;  // 0: world / (tp * cp * pp)
  int64_t ep = 1;
  // Experts split over tp (Megatron-LM's expert tensor parallelism): 1, experts replicated over tp; tp,
  // each expert's width split over the tp group like the dense MLP's.
  int64_t expert_tp = 1;
  // Context parallelism: each sequence split over cp ranks, attention by ring (p2p) or all-to-all (a2a).
  int64_t cp = 1;
  ContextComm cp_comm = ContextComm::p2p;
  bool sequence_parallel = false;
  int64_t virtual_stages = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int64_t zero_stage = 0;
  // HSDP: ZeRO (1, 2 or 3) shards over groups of dp_shard dp ranks (times cp) and replicates across
  // them: gradients reduce-scattered inside the shard group, each shard all-reduced across the
  // replicas, parameters gathered inside the shard group. 0: all of dp (plain ZeRO).
  int64_t dp_shard = 0;
  // The dp ranks of a shard group (dp unless HSDP), and whether ZeRO replicates across shard groups.
  int64_t dp_shard_size() const { return dp_shard > 0 ? dp_shard : dp; }
  bool hsdp() const { return dp_shard > 0 && dp_shard < dp; }
  std::string order = "tp-cp-ep-dp-pp";
  int64_t ranks_per_node = 0;  // 0: from the launcher (its local world size) and the host names
  // The gradient all-reduce over dp: one ring over the group (flat), or a reduce-scatter inside each
  // node, an all-reduce of each rank's share across nodes and an all-gather inside the node again.
  DpCollectives dp_collectives = DpCollectives::flat;
  // The data-parallel gradient all-reduce compressed (parallel/grad_compression.h), ZeRO 0 and 1.
  GradCompression grad_compression = GradCompression::none;
  bool grad_compression_error_feedback = true;  // what compression lost is added to the next step
  PowerSgdConfig powersgd;
  CommBackend backend = CommBackend::automatic;
  double timeout_s = 300.0;                                   // every collective fails after this long
  double bucket_mb = 25.0;                                    // data-parallel gradient buckets; 0: one bucket
  GradReduceDtype grad_reduce_dtype = GradReduceDtype::fp32;  // the dtype gradients are reduced in over dp
};

// Muon's settings (train.optimizer: muon), for the 2-D weights inside the blocks; AdamW keeps the rest.
struct MuonConfig {
  double lr = 0.0;             // the Muon group's peak; 0: train.lr (the schedule's shape is shared)
  double weight_decay = -1.0;  // -1: train.weight_decay
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;           // Newton-Schulz iterations
  std::string ns_dtype = "fp32";  // the iteration's dtype: fp32, or bf16 (faster on GPUs, coarser)
  // Comma-separated parameter name patterns ('*': any characters) that Muon takes beside the
  // blocks' matrices, and that go back to AdamW (core/muon_groups.h).
  std::string include;
  std::string exclude;
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t global_batch_size = 8;
  int64_t micro_batch_size = 8;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 10;
  // After warm-up (Megatron-LM's choices): the decay's shape, its length in steps (0: steps - warmup_steps),
  // and for wsd the final steps of it that anneal to min_lr (the rest stays at lr).
  LrDecayStyle lr_decay_style = LrDecayStyle::cosine;
  int64_t lr_decay_steps = 0;
  int64_t lr_wsd_decay_steps = 0;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: no clipping
  OptimizerKind optimizer = OptimizerKind::adamw;
  MuonConfig muon;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  int64_t seed = 1234;
  TrainPrecision precision = TrainPrecision::fp32;  // fp32 master weights and optimizer state under bf16, fp16
  // fp16 loss scaling: a fixed scale when loss_scale > 0, else dynamic: starts at
  // initial_loss_scale, halves on an overflow (the step is skipped), doubles
  // after loss_scale_window steps without one, never below min_loss_scale.
  double loss_scale = 0.0;
  double initial_loss_scale = 65536.0;
  int64_t loss_scale_window = 1000;
  double min_loss_scale = 1.0;
  int64_t threads_per_rank = 0;  // 0: cores / local ranks
  double peak_tflops = 0.0;      // one device's dense peak (TFLOP/s) for the MFU line; 0: the device's known peak
  // auto: cuda when LibTorch sees a GPU, else cpu; cuda: one GPU per local rank.
  TrainDevice device = TrainDevice::automatic;
  Recompute recompute = Recompute::none;
  int64_t exit_after = -1;  // save and stop after this step (the schedule still spans steps); -1: never
  // Save and stop after the first step that ends this many minutes after the trainer was built (Megatron-LM's
  // --exit-duration-in-mins: a job that fits its time limit); 0: never.
  double exit_duration_mins = 0.0;
  // Steps in a row whose update is skipped for a non-finite loss or gradient norm before the run stops (exit 3).
  int64_t max_skipped_steps = 5;
  // Refuse, before building anything, a layout whose estimated memory per node (loom plan's
  // model state and activations) exceeds the machine's; false trains anyway.
  bool memory_check = true;
  // A step (or an evaluation batch) that makes no progress for this long ends the job, exit 1: a stall
  // of every rank at once that no collective's timeout sees (launch/step_watchdog.h). 0: automatic.
  double step_timeout_s = 0.0;
};

struct DataConfig {
  // PREFIX of PREFIX.bin/.idx, or a blend "W1 PREFIX1 W2 PREFIX2 ..." (Megatron-LM's form); empty: built-in synthetic
  // corpus.
  std::string path;
  DataOrder order = DataOrder::sequential;
  std::string valid_path;  // the validation data, in the same forms; empty: none unless data.split gives it
  std::string split;       // "TRAIN,VALID,TEST" weights (Megatron-LM's "969,30,1") cutting each training dataset
  // Megatron-LM's --eod-mask-loss: no loss on a target whose input is the end-of-document token
  // (the next document's first token, guessed across the boundary). The loss is then the mean over
  // the global batch's remaining targets, whatever the layout (core/loss_mask.h).
  bool eod_mask_loss = false;
  int64_t eod_id = -1;  // that token; -1: the eos_id of the datasets' sidecars (loom prepare --append-eod)
};

// Validation: the mean loss over the same eval.steps global batches of the validation data.
struct EvalConfig {
  int64_t interval = 1000;  // steps between evaluations (and one at the last step); 0: only at the last step
  int64_t steps = 10;       // global batches per evaluation
};

struct CheckpointConfig {
  std::string dir;
  int64_t interval = 0;
  int64_t keep = 2;
  // Copy the state to host memory at the step boundary and write it from a background thread while training goes on.
  bool async = false;
  // Seconds a rank waits on another's checkpoint files (written, or checked before a resume) before
  // it takes that rank for stuck: a checkpoint of tens of GB outlasts parallel.timeout_s's 300.
  double timeout_s = 3600;
};

struct LogConfig {
  int64_t interval = 10;
  bool trace = false;              // write RUN_DIR/trace_rankR.json: the last step's gradient-bucket events
  bool tensorboard = false;        // RUN_DIR/tensorboard/events.out.tfevents.*: metrics.jsonl's scalars for TensorBoard
  int64_t profile_step_start = 0;  // LibTorch's profiler over these steps (0: off): RUN_DIR/profile_rank0.json
  int64_t profile_step_end = 0;    // inclusive; 0: profile_step_start alone
  std::string cluster;  // a cluster file: every run ends with loom plan's prediction beside its measured split
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  DataConfig data;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  LogConfig log;

  std::string source;  // file the config came from, for messages
  // The keys the YAML file or an override set ("model.norm"): the others keep their
  // defaults, which model.arch or a Hugging Face config.json may choose.
  std::set<std::string> set_keys;
  // The keys model.init_from's config.json gave (core/hf_config.h), and that file: a refusal of
  // one of them says where its value came from, which the user's config does not show.
  std::set<std::string> hf_keys;
  std::string hf_file;

  // model.ffn_hidden_size, or its default: 4 h for GELU; Llama's 2/3 of 4 h rounded up to a multiple of 256 for SwiGLU.
  int64_t ffn_size() const {
    if (model.ffn_hidden_size > 0) return model.ffn_hidden_size;
    if (model.activation == Activation::gelu) return 4 * model.hidden_size;
    return (8 * model.hidden_size / 3 + 255) / 256 * 256;
  }
  // The width of each expert: model.moe.moe_intermediate_size, or the dense MLP's.
  int64_t moe_ffn_size() const {
    return model.moe.moe_intermediate_size > 0 ? model.moe.moe_intermediate_size : ffn_size();
  }
  int64_t micro_batches_per_step() const { return train.global_batch_size / (train.micro_batch_size * parallel.dp); }
};

// Reads FILE and applies "section.key=value" overrides in order. Unknown keys,
// values of the wrong type and unreadable files throw InputError naming them.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Applies one "section.key=value" override.
void apply_override(Config& config, const std::string& assignment);

// Gives the model keys the config did not set (Config::set_keys) model.arch's
// defaults. load_config calls it; a Config built in code calls it after setting arch.
void resolve_model_defaults(Config& config);

// Resolves parallel.dp against WORLD and checks every value and their
// relations. Throws InputError naming the key and what would be valid.
void resolve_and_validate(Config& config, int64_t world);  // core/config_validation.cpp

// The fully resolved config as YAML (every key, defaults included).
std::string to_yaml(const Config& config);

}  // namespace loom
