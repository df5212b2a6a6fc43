// Mixture of Experts: a router and NUM_EXPERTS expert MLPs that replace a
// block's MLP (Switch Transformer, GShard; Megatron-LM's MoE layer).
//
// Router: logits = x W_r, probabilities by softmax (or each expert's sigmoid, DeepSeek-V3),
// the top k experts of each token (among the best groups' experts under group-limited
// routing), their weights renormalised to sum to one (with k = 1 the weight is the
// router probability, as in Switch, or the router would get no gradient from
// the language-model loss; model.moe.norm_topk_prob: false keeps the scores) and
// times model.moe.routed_scaling_factor. The load-balancing loss
// (Switch/GShard) E * sum_e f_e P_e, with f_e the share of the T k choices
// that picked expert e (counted before any dropping) and P_e the mean router
// probability of e, and the router z-loss mean_t logsumexp(logits_t)^2 are
// added to the training loss with their coefficients. model.moe.aux_loss_type: sequence takes the
// balancing loss per sequence (f and P over its own tokens) and averages it over the sequences;
// none leaves it out (the batch figure is still reported).
//
// Capacity: with capacity_factor c > 0, expert e takes at most
// max(1, ceil(T k / E c)) choices of the T tokens this rank routes (under
// sequence parallelism: its part of the micro-batch's sequence); the
// choices over capacity are dropped lowest router probability first (ties: the
// later token first). A dropped choice contributes nothing; a token whose
// every choice was dropped passes through the residual only.
//
// Experts are spread over the ep group (parallel/moe_dispatch.h) and are
// replicated over tp: without sequence parallelism every tp rank routes the
// same tokens (the attention around them stays tensor parallel); with it each
// routes its own part of the sequence, and the router statistics of the loss
// are summed over tp so that the loss is that of the whole sequence. Under
// expert tensor parallelism (MoELayerOptions::expert_tp) each expert is split
// over tp instead, and every tp rank routes the whole sequence.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "parallel/communicator.h"
#include "parallel/moe_dispatch.h"
#include "parallel/parallel_module.h"
#include "parallel/parallel_parameter.h"

namespace loom::models {

// The router's decision for T tokens.
struct Routing {
  parallel::ExpertAssignment assignment;
  torch::Tensor probs;   // [T, E] router probabilities (differentiable)
  torch::Tensor counts;  // [E] int64: choices of each expert, before dropping
  int64_t dropped = 0;   // choices dropped over capacity
};

// How a router turns logits into choices (model.moe's router keys).
struct RouterOptions {
  int64_t top_k = 2;
  double capacity_factor = 0.0;  // 0: unlimited
  bool sigmoid = false;          // scores: each expert's sigmoid (DeepSeek-V3), else softmax over the experts
  bool norm_topk_prob = true;    // the chosen weights renormalised to sum to one (top_k > 1)
  double routed_scaling_factor = 1.0;
  int64_t n_group = 1, topk_group = 1;  // group-limited routing (n_group > 1)
  torch::Tensor bias;                   // [E] added to the scores for choosing only; undefined: none
  static RouterOptions of(const MoEConfig& moe);
};

// One step of DeepSeek-V3's bias update: BIAS[e] += RATE * sign(mean(LOADS) - LOADS[e]).
void update_expert_bias(std::vector<double>& bias, const std::vector<double>& loads, double rate);

// LOGITS [T, E] -> top-k routing with capacity. Routing::probs are the scores (softmax or
// sigmoid); the chosen experts are the top k of them among the eligible groups' experts, their
// weights the chosen scores, renormalised if asked, times the scaling factor.
Routing route_tokens(const torch::Tensor& logits, const RouterOptions& options);
Routing route_tokens(const torch::Tensor& logits, int64_t top_k, double capacity_factor);
// max(1, ceil(TOKENS * TOP_K / NUM_EXPERTS * CAPACITY_FACTOR)).
int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t num_experts, double capacity_factor);
// E * sum_e (COUNTS_e / (TOKENS k)) (PROBS_SUM_e / TOKENS): PROBS_SUM is the router
// probabilities summed over the TOKENS tokens, COUNTS the choices per expert. Given [G, E] (each
// of G sequences' own, TOKENS a sequence's), the mean over the G of that loss: DeepSeek-V3's
// sequence-wise balance loss.
torch::Tensor load_balancing_loss(const torch::Tensor& probs_sum, const torch::Tensor& counts, int64_t tokens,
                                  int64_t top_k);
// sum_t logsumexp(LOGITS_t)^2 / TOKENS (TOKENS: all tokens the loss is the mean over).
torch::Tensor router_z_loss(const torch::Tensor& logits, int64_t tokens);

// What an MoE layer saw during one optimizer step. Each rank records its share so that
// the sum over all ranks is the global figure (tp replicas record once).
struct MoEStats {
  int64_t layer = 0;                // global block index
  torch::Tensor tokens_per_expert;  // [E] int64: choices routed to each expert, before dropping
  int64_t dropped = 0;
  torch::Tensor aux_loss, z_loss;  // sums over the step's micro-batches, unscaled by coefficients
  int64_t micro_batches = 0;
  parallel::AllToAllVolume volume;  // this rank's all-to-all bytes, forward and backward
  // [E] fp32: the layer's expert bias for choosing (model.moe.bias_update_rate > 0; else
  // undefined). The router reads it; the trainer moves it after each step from the global loads
  // (launch/moe_metrics.h). Not a parameter: no optimizer or weight decay touches it.
  torch::Tensor expert_bias;
  void reset();
  // Moves the sums to DEVICE (the routing's), so that recording adds without a copy to the host.
  void keep_on(const torch::Device& device);
};

struct MoELayerOptions {
  int64_t hidden_size = 64;
  int64_t ffn_hidden_size = 256;  // each expert's width
  // SwiGLU experts, proj(silu(gate x) * up x) (Mixtral, Qwen3-MoE, DeepSeek-V3), with biases if
  // asked; else GPT-2's fc -> GELU (tanh) -> proj, with biases.
  bool swiglu = false;
  bool swiglu_bias = false;
  MoEConfig moe;
  int64_t layer = 0;  // names are "h.LAYER.moe...."
  uint64_t seed = 1234;
  double init_std = 0.02;
  double output_init_std = 0.02;  // the experts' projection into the residual stream
  bool sequence_parallel = false;
  // Expert tensor parallelism (parallel.expert_tp): each expert's width split over tp (gate, up and
  // fc by rows, proj by columns, as the dense MLP), where the experts are otherwise whole on every tp
  // rank. Every tp rank then routes the same tokens (under sequence parallelism the layer gathers
  // the sequence first and keeps its own part of the output), the expert inputs' gradients and the
  // expert outputs are summed over tp before the routing weights apply, and proj's bias (GPT's
  // experts) is added once after that sum.
  bool expert_tp = false;
  // Draws the router jitter under sequence parallelism (tp ranks hold different
  // tokens); null, or without SP: the default generator.
  at::Generator* split_generator = nullptr;
  // The factor the trainer puts on each micro-batch's loss (1 / micro-batches
  // per step): the auxiliary losses' gradients get the same.
  double loss_scale = 1.0;
};

class MoELayerImpl : public parallel::ParallelModule {
 public:
  // EP: the expert-parallel group; TP: the tensor-parallel group (for the router statistics under SP);
  // CP: the context-parallel group, whose ranks hold the other parts of each sequence (null: none).
  MoELayerImpl(const MoELayerOptions& options, parallel::Communicator& ep, parallel::Communicator& tp,
               parallel::Communicator* cp = nullptr);
  // x [B, S, H] -> [B, S, H]. RECORD: add this call to stats() (false while recomputing).
  torch::Tensor forward(const torch::Tensor& x, bool record = true);
  std::vector<parallel::ParallelParameter> parallel_parameters() const;
  MoEStats& stats() { return stats_; }
  const MoELayerOptions& options() const { return options_; }

 private:
  // Routes X, the tokens this rank routes (under sequence parallelism with expert_tp: the gathered sequence).
  torch::Tensor routed(const torch::Tensor& x, bool record);
  // The local experts on their sorted rows: whole, or under expert_tp split over tp and summed there.
  torch::Tensor experts(const torch::Tensor& tokens, const parallel::GroupRows& tokens_per_expert);
  torch::Tensor expert_products(const torch::Tensor& tokens, const parallel::GroupRows& tokens_per_expert);
  torch::Tensor grouped_experts(const torch::Tensor& tokens, const parallel::GroupRows& rows);
  // Whether each tp rank routes its own part of the sequence (sequence parallelism without expert_tp).
  bool routes_own_part() const;
  MoELayerOptions options_;
  parallel::Communicator& ep_;
  parallel::Communicator& tp_;
  parallel::Communicator* cp_;
  parallel::TokenDispatcher dispatcher_;
  torch::Tensor router_;  // [E, H]
  struct Expert {
    int64_t index;                             // global
    torch::Tensor fc_w, fc_b;                  // GELU
    torch::Tensor gate_w, gate_b, up_w, up_b;  // SwiGLU (biases undefined unless asked)
    torch::Tensor proj_w, proj_b;
  };
  std::vector<Expert> experts_;  // this rank's
  // Whether the first grouped product has run: it packs each kind of bf16 expert weight on a GPU
  // into one storage (models/grouped_linear.h), before any graph has saved them.
  bool first_product_done_ = false;
  MoEStats stats_;
};
TORCH_MODULE(MoELayer);

// Whether block LAYER of a model with MOE has experts.
inline bool is_moe_layer(const MoEConfig& moe, int64_t layer) {
  return moe_block(moe, layer);
}

}  // namespace loom::models
