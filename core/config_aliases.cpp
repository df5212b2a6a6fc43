#include "core/config_aliases.h"

#include <algorithm>

namespace loom {

const std::vector<MegatronAlias>& megatron_aliases() {
  static const std::vector<MegatronAlias> table = {
      {"num_layers", "model.num_layers", ""},
      {"hidden_size", "model.hidden_size", ""},
      {"ffn_hidden_size", "model.ffn_hidden_size", ""},
      {"num_attention_heads", "model.num_heads", ""},
      {"seq_length", "model.seq_len", ""},
      {"max_position_embeddings", "model.seq_len", "loom's positions span the sequence"},
      {"vocab_size", "model.vocab_size", ""},
      {"hidden_dropout", "model.dropout", "one probability for every dropout"},
      {"attention_dropout", "model.dropout", "one probability for every dropout"},
      {"num_experts", "model.moe.num_experts", ""},
      {"moe_router_topk", "model.moe.top_k", ""},
      {"moe_layer_freq", "model.moe.every", ""},
      {"moe_expert_capacity_factor", "model.moe.capacity_factor", ""},
      {"moe_aux_loss_coeff", "model.moe.aux_loss_coeff", ""},
      {"moe_z_loss_coeff", "model.moe.z_loss_coeff", ""},
      {"moe_input_jitter_eps", "model.moe.router_jitter", ""},
      {"moe_router_score_function", "model.moe.score", ""},
      {"moe_router_topk_scaling_factor", "model.moe.routed_scaling_factor", ""},
      {"moe_router_bias_update_rate", "model.moe.bias_update_rate", ""},

      {"tensor_model_parallel_size", "parallel.tp", ""},
      {"pipeline_model_parallel_size", "parallel.pp", ""},
      {"virtual_pipeline_model_parallel_size", "parallel.virtual_stages", "with parallel.schedule=interleaved"},
      {"num_layers_per_virtual_pipeline_stage", "parallel.virtual_stages",
       "loom counts model chunks per stage, not layers per chunk; with parallel.schedule=interleaved"},
      {"sequence_parallel", "parallel.sequence_parallel", ""},
      {"expert_model_parallel_size", "parallel.ep", ""},
      {"expert_tensor_parallel_size", "parallel.expert_tp", "1, or the same as tensor_model_parallel_size"},
      {"use_distributed_optimizer", "parallel.zero_stage", "the distributed optimizer is ZeRO stage 1: set it to 1"},
      {"distributed_backend", "parallel.backend", ""},
      {"context_parallel_size", "parallel.cp", ""},

      {"train_iters", "train.steps", ""},
      {"micro_batch_size", "train.micro_batch_size", ""},
      {"global_batch_size", "train.global_batch_size", ""},
      {"lr", "train.lr", ""},
      {"min_lr", "train.min_lr", ""},
      {"lr_warmup_iters", "train.warmup_steps", ""},
      {"weight_decay", "train.weight_decay", ""},
      {"clip_grad", "train.grad_clip", ""},
      {"adam_beta1", "train.adam_beta1", ""},
      {"adam_beta2", "train.adam_beta2", ""},
      {"adam_eps", "train.adam_eps", ""},
      {"seed", "train.seed", ""},
      {"bf16", "train.precision", "set it to bf16"},
      {"fp16", "train.precision", "set it to fp16"},
      {"loss_scale", "train.loss_scale", ""},
      {"initial_loss_scale", "train.initial_loss_scale", ""},
      {"min_loss_scale", "train.min_loss_scale", ""},
      {"loss_scale_window", "train.loss_scale_window", ""},
      {"recompute_granularity", "train.recompute", "full or selective"},
      {"recompute_activations", "train.recompute", "set it to selective"},

      {"data_path", "data.path", ""},
      {"eod_mask_loss", "data.eod_mask_loss", ""},
      {"reset_attention_mask", "",
       "not built: attention crosses document boundaries within a sample (data.eod_mask_loss leaves out the loss "
       "across them)"},
      {"reset_position_ids", "", "not built: positions run over the whole sample"},
      {"save", "checkpoint.dir", ""},
      {"load", "checkpoint.dir", "and run loom train --resume auto"},
      {"save_interval", "checkpoint.interval", ""},
      {"exit_interval", "train.exit_after", "a step, not an interval: the run saves and exits after it"},
      {"exit_duration_in_mins", "train.exit_duration_mins", ""},
      {"log_interval", "log.interval", ""},
  };
  return table;
}

namespace {

// "--train-iters" and "train.train_iters" become "train_iters".
std::string megatron_spelling(const std::string& name) {
  std::string last = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
  last.erase(0, last.find_first_not_of('-'));
  std::replace(last.begin(), last.end(), '-', '_');
  return last;
}

}  // namespace

std::string megatron_hint(const std::string& name) {
  const std::string spelling = megatron_spelling(name);
  for (const auto& alias : megatron_aliases()) {
    if (spelling != alias.megatron) continue;
    std::string flag = "--" + spelling;
    std::replace(flag.begin() + 2, flag.end(), '_', '-');
    if (*alias.loom == '\0') return "Megatron-LM's " + flag + ": " + alias.note;
    return std::string("did you mean '") + alias.loom + "'? (Megatron-LM's " + flag + (*alias.note ? "; " : "") +
           alias.note + ")";
  }
  return "";
}

}  // namespace loom
