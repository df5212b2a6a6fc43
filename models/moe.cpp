#include "models/moe.h"

#include <c10/util/Optional.h>  // c10::optional: a class of its own in LibTorch 1.13, std::optional's alias in 2.x

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/precision.h"
#include "models/grouped_linear.h"
#include "models/swiglu.h"
#include "parallel/init.h"
#include "parallel/tp_regions.h"
#include "parallel/weight_grad_store.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Ties the auxiliary losses to the layer's output: forward returns the output
// unchanged, backward also starts the auxiliary loss's backward with gradient
// SCALE. The losses then need no path to the pipeline's last stage, where the
// language-model loss is (Megatron-LM's MoEAuxLossAutoScaler).
struct AttachLoss : torch::autograd::Function<AttachLoss> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& output, const torch::Tensor& loss,
                               double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["loss_options"] = loss.scalar_type();
    return output.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const double scale = ctx->saved_data["scale"].toDouble();
    auto dtype = ctx->saved_data["loss_options"].toScalarType();
    return {grads[0], torch::full({}, scale, grads[0].options().dtype(dtype)), torch::Tensor()};
  }
};

}  // namespace

int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t num_experts, double capacity_factor) {
  const double exact = static_cast<double>(tokens * top_k) / static_cast<double>(num_experts) * capacity_factor;
  // 2.0000000001 from rounding is still 2; at least one slot, so a tiny factor cannot silently drop everything.
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(exact - 1e-9)));
}

RouterOptions RouterOptions::of(const MoEConfig& moe) {
  RouterOptions o;
  o.top_k = moe.top_k;
  o.capacity_factor = moe.capacity_factor;
  o.sigmoid = moe.score == "sigmoid";
  o.norm_topk_prob = moe.norm_topk_prob;
  o.routed_scaling_factor = moe.routed_scaling_factor;
  o.n_group = moe.n_group;
  o.topk_group = moe.topk_group;
  return o;
}

Routing route_tokens(const torch::Tensor& logits, int64_t top_k, double capacity_factor) {
  RouterOptions options;
  options.top_k = top_k;
  options.capacity_factor = capacity_factor;
  return route_tokens(logits, options);
}

Routing route_tokens(const torch::Tensor& logits, const RouterOptions& options) {
  const int64_t tokens = logits.size(0), num_experts = logits.size(1), top_k = options.top_k;
  const double capacity_factor = options.capacity_factor;
  Routing r;
  const auto scores = logits.to(torch::kFloat32);
  r.probs = options.sigmoid ? scores.sigmoid() : torch::softmax(scores, -1);
  torch::Tensor top_probs, experts;
  // What the choice ranks: the scores, plus the expert bias when there is one (the weights stay
  // the scores themselves).
  const auto choice = options.bias.defined() ? r.probs.detach() + options.bias.to(r.probs.device()) : r.probs;
  if (options.n_group > 1 || options.bias.defined()) {
    // Each group scored by the sum of its best two experts; the experts outside the TOPK_GROUP
    // best groups cannot be chosen (one group: all eligible).
    torch::NoGradGuard no_grad;  // choosing; the weights below are gathered with autograd on
    const int64_t per_group = num_experts / options.n_group;
    const auto grouped = choice.view({tokens, options.n_group, per_group});
    const auto group_scores = std::get<0>(grouped.topk(std::min<int64_t>(2, per_group), -1)).sum(-1);
    const auto best_groups = std::get<1>(group_scores.topk(options.topk_group, -1));
    const auto eligible = torch::zeros_like(group_scores, torch::kBool).scatter_(1, best_groups, true);
    const auto masked = choice.masked_fill(
        ~eligible.unsqueeze(-1).expand({tokens, options.n_group, per_group}).reshape({tokens, num_experts}),
        -std::numeric_limits<float>::infinity());
    experts = std::get<1>(masked.topk(top_k, -1));
  }
  if (experts.defined()) {
    top_probs = r.probs.gather(1, experts);
  } else {
    std::tie(top_probs, experts) = r.probs.topk(top_k, -1);
  }
  r.assignment.experts = experts;
  // Renormalised over the chosen experts; with one choice that would make every
  // weight 1 and cut the router off from the language-model loss, so top-1
  // keeps the router probability (Switch Transformer). Sigmoid scores need not sum to
  // anything: their sum gets DeepSeek-V3's 1e-20 against a zero.
  auto weights = top_probs;
  if (options.norm_topk_prob && top_k > 1)
    weights = top_probs / (options.sigmoid ? top_probs.sum(-1, true) + 1e-20 : top_probs.sum(-1, true));
  if (options.routed_scaling_factor != 1.0) weights = weights * options.routed_scaling_factor;
  r.assignment.weights = weights;
  r.counts = parallel::count_per_expert(experts, num_experts);
  r.assignment.keep = torch::ones_like(experts, torch::kBool);
  r.assignment.all_kept = capacity_factor <= 0;
  if (r.assignment.all_kept) return r;

  torch::NoGradGuard no_grad;
  const int64_t capacity = expert_capacity(tokens, top_k, num_experts, capacity_factor);
  // Order the choices by expert, then by router probability (highest first),
  // then by token; each expert keeps its first CAPACITY.
  auto by_prob = std::get<1>(top_probs.reshape({-1}).sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  auto experts_by_prob = experts.reshape({-1}).index_select(0, by_prob);
  auto within = std::get<1>(experts_by_prob.sort(/*stable=*/true, 0, false));
  auto order = by_prob.index_select(0, within);  // choice numbers in (expert, -prob, token) order
  auto sorted_experts = experts_by_prob.index_select(0, within);
  auto first_of_expert = r.counts.cumsum(0) - r.counts;
  auto position = torch::arange(order.size(0), order.options()) - first_of_expert.index_select(0, sorted_experts);
  auto keep = torch::empty({order.size(0)}, order.options().dtype(torch::kBool));
  keep.index_copy_(0, order, position < capacity);
  r.assignment.keep = keep.view(experts.sizes());
  r.dropped = (~keep).sum().item<int64_t>();
  return r;
}

torch::Tensor load_balancing_loss(const torch::Tensor& probs_sum, const torch::Tensor& counts, int64_t tokens,
                                  int64_t top_k) {
  const double num_experts = static_cast<double>(probs_sum.size(-1)), t = static_cast<double>(tokens);
  const double groups = static_cast<double>(probs_sum.numel()) / num_experts;
  return (probs_sum * counts.to(probs_sum.scalar_type())).sum() *
         (num_experts / (t * t * static_cast<double>(top_k) * groups));
}

torch::Tensor router_z_loss(const torch::Tensor& logits, int64_t tokens) {
  return torch::logsumexp(logits.to(torch::kFloat32), -1).pow(2).sum() / static_cast<double>(tokens);
}

void MoEStats::reset() {
  if (tokens_per_expert.defined()) tokens_per_expert.zero_();
  dropped = 0;
  auto options = torch::TensorOptions().dtype(torch::kFloat64);
  if (tokens_per_expert.defined()) options = options.device(tokens_per_expert.device());
  aux_loss = torch::zeros({}, options);
  z_loss = torch::zeros({}, options);
  micro_batches = 0;
  volume = {};
}

void update_expert_bias(std::vector<double>& bias, const std::vector<double>& loads, double rate) {
  TORCH_CHECK(bias.size() == loads.size(), "update_expert_bias: ", bias.size(), " biases, ", loads.size(), " loads");
  double total = 0;
  for (double l : loads) total += l;
  const double mean = total / static_cast<double>(loads.size());  // a load equal to the mean moves nothing
  for (size_t e = 0; e < bias.size(); ++e) {
    const double gap = mean - loads[e];
    bias[e] += rate * static_cast<double>((gap > 0) - (gap < 0));
  }
}

void MoEStats::keep_on(const torch::Device& device) {
  if (expert_bias.defined() && expert_bias.device() != device) expert_bias = expert_bias.to(device);
  if (tokens_per_expert.device() == device) return;
  tokens_per_expert = tokens_per_expert.to(device);
  aux_loss = aux_loss.to(device);
  z_loss = z_loss.to(device);
}

MoELayerImpl::MoELayerImpl(const MoELayerOptions& options, parallel::Communicator& ep, parallel::Communicator& tp,
                           parallel::Communicator* cp)
    : options_(options), ep_(ep), tp_(tp), cp_(cp), dispatcher_(options.moe.num_experts, ep, &stats_.volume) {
  const int64_t h = options.hidden_size, f = options.ffn_hidden_size, e = options.moe.num_experts;
  const std::string p = "h." + std::to_string(options.layer) + ".moe.";
  // Gradients summed over tp where each tp rank routes its own tokens.
  const bool sp = routes_own_part();
  router_ = register_parallel_parameter(
      "router_weight", parallel::init_normal(options.seed, p + "router.weight", {e, h}, options.init_std),
      {p + "router.weight", {}, -1, sp});
  for (int64_t i = 0; i < dispatcher_.num_local_experts(); ++i) {
    const int64_t g = dispatcher_.first_local_expert() + i;
    const std::string name = p + "experts." + std::to_string(g) + ".";
    const std::string reg = "expert_" + std::to_string(g) + "_";
    Expert x;
    x.index = g;
    // Drawn by global name: expert g starts the same whichever rank holds it.
    // Each expert lives on one ep rank, replicated over expert-dp.
    // SPLIT: the dimension expert tensor parallelism splits (-1: whole on every tp rank).
    auto expert = [&](const std::string& suffix, torch::Tensor init, int64_t split) {
      if (!options.expert_tp) split = -1;
      parallel::ParallelParameter spec{name + suffix, {}, split, sp};
      spec.expert = true;
      std::string local = reg + suffix;
      std::replace(local.begin(), local.end(), '.', '_');
      return register_parallel_parameter(local, split >= 0 ? parallel::slice_along(init, split, tp) : init, spec);
    };
    // Registered in order of use: the parameters are collected in this order.
    if (options.swiglu) {
      for (auto [w, b, part] : {std::tuple{&x.gate_w, &x.gate_b, "gate"}, std::tuple{&x.up_w, &x.up_b, "up"}}) {
        const std::string weight = std::string(part) + ".weight";
        *w = expert(weight, parallel::init_normal(options.seed, name + weight, {f, h}, options.init_std), 0);
        if (options.swiglu_bias) *b = expert(std::string(part) + ".bias", torch::zeros({f}), 0);
      }
    } else {
      x.fc_w =
          expert("fc.weight", parallel::init_normal(options.seed, name + "fc.weight", {f, h}, options.init_std), 0);
      x.fc_b = expert("fc.bias", torch::zeros({f}), 0);
    }
    x.proj_w = expert("proj.weight",
                      parallel::init_normal(options.seed, name + "proj.weight", {h, f}, options.output_init_std), 1);
    if (!options.swiglu || options.swiglu_bias) x.proj_b = expert("proj.bias", torch::zeros({h}), -1);
    experts_.push_back(x);
  }
  stats_.layer = options.layer;
  stats_.tokens_per_expert = torch::zeros({e}, torch::kInt64);
  if (options.moe.has_expert_bias()) stats_.expert_bias = torch::zeros({e}, torch::kFloat32);
  stats_.reset();
}

bool MoELayerImpl::routes_own_part() const {
  return options_.sequence_parallel && !options_.expert_tp;
}

torch::Tensor MoELayerImpl::experts(const torch::Tensor& tokens, const parallel::GroupRows& tokens_per_expert) {
  if (!options_.expert_tp) return expert_products(tokens, tokens_per_expert);
  // Split over tp: each rank's part of the width gives a part of every output row, summed over tp
  // before the routing weights apply (their gradient needs the whole output); the input's gradient
  // is each rank's part too, summed on the way back.
  auto out = parallel::reduce_from_tp_region(
      expert_products(parallel::copy_to_tp_region(tokens, tp_), tokens_per_expert), tp_);
  if (!experts_.front().proj_b.defined()) return out;
  // proj's bias once, after the sum: each row gets its own expert's.
  std::vector<torch::Tensor> biases;
  for (const auto& x : experts_) biases.push_back(cast_to_activation(x.proj_b, out));
  return add_grouped_biases(out, torch::stack(biases), tokens_per_expert);
}

torch::Tensor MoELayerImpl::expert_products(const torch::Tensor& tokens, const parallel::GroupRows& tokens_per_expert) {
  // Every local expert takes part, on no rows if it got none, so that its parameters get a (zero)
  // gradient every micro-batch like any other. One grouped product per weight over all local
  // experts; under a zero-bubble schedule's deferred weight gradients (which the W pass computes
  // one weight at a time) a product per expert, each deferring its own.
  // Chosen by the scope alone, not by grad mode: a recomputed forward takes the path of the first.
  if (!parallel::current_weight_grad_deferral().store) return grouped_experts(tokens, tokens_per_expert);
  auto groups = tokens.split_with_sizes(tokens_per_expert.host(), 0);
  std::vector<torch::Tensor> outputs;
  for (size_t i = 0; i < experts_.size(); ++i) {
    const auto& x = experts_[i];
    const auto& in = groups[i];
    // An undefined bias (SwiGLU experts without biases) stays undefined through the cast.
    auto linear = [&](const torch::Tensor& input, const torch::Tensor& w, const torch::Tensor& b) {
      return parallel::linear_deferring_weight_grad(input, cast_to_activation(w, in), cast_to_activation(b, in));
    };
    auto hidden = x.fc_w.defined() ? torch::gelu(linear(in, x.fc_w, x.fc_b), "tanh")
                                   : swiglu(linear(in, x.gate_w, x.gate_b), linear(in, x.up_w, x.up_b));
    outputs.push_back(linear(hidden, x.proj_w, options_.expert_tp ? torch::Tensor() : x.proj_b));
  }
  return torch::cat(outputs, 0);
}

torch::Tensor MoELayerImpl::grouped_experts(const torch::Tensor& tokens, const parallel::GroupRows& rows) {
  if (!first_product_done_) {
    first_product_done_ = true;
    // On a GPU the bf16 weights (the master weights' model copies) go to ATen's grouped GEMM
    // as they are: packed, they need no stacked copy per product. The layer's first grouped
    // product comes before any graph saves them: the first training forward, or (under a split
    // backward, whose training takes a product per expert) an evaluation, which saves nothing.
    // Elsewhere they stay apart (ZeRO-2/3 on the CPU frees and regrows each parameter's own
    // storage), and so do weights that are views into a buffer of someone else's.
    // Gate and up go in together, expert by expert (gate 0, up 0, gate 1, ...), as their fused
    // product stacks them.
    using Members = std::vector<torch::Tensor Expert::*>;
    for (const auto& members :
         {Members{&Expert::fc_w}, Members{&Expert::gate_w, &Expert::up_w}, Members{&Expert::proj_w}}) {
      const auto& first = experts_.front().*members.front();
      if (!first.defined() || !first.is_cuda() || first.scalar_type() != torch::kBFloat16 ||
          tokens.scalar_type() != torch::kBFloat16)
        continue;
      std::vector<torch::Tensor> weights;
      for (const auto& x : experts_)
        for (auto member : members) weights.push_back(x.*member);
      pack_into_one_storage(weights);
    }
  }
  // Each kind of weight of the local experts in one list (stacked inside grouped_linear for the call
  // only), biases stacked [G, out] where there are.
  auto each = [&](torch::Tensor Expert::*member) {
    std::vector<torch::Tensor> parts;
    for (const auto& x : experts_) parts.push_back(cast_to_activation(x.*member, tokens));
    return parts;
  };
  auto linear = [&](const torch::Tensor& input, torch::Tensor Expert::*w, torch::Tensor Expert::*b) {
    // Under expert_tp proj's bias is added after the sum over tp (experts()).
    const bool bias = (experts_.front().*b).defined() && !(options_.expert_tp && b == &Expert::proj_b);
    return grouped_linear(input, each(w), bias ? torch::stack(each(b)) : torch::Tensor(), rows);
  };
  // SwiGLU's gate and up as one grouped product, each expert's two weights one above the other.
  auto gate_up = [&] {
    auto both = grouped_linear_kinds(tokens, {each(&Expert::gate_w), each(&Expert::up_w)}, rows);
    if (experts_.front().gate_b.defined())
      both = add_grouped_biases(
          both, torch::cat({torch::stack(each(&Expert::gate_b)), torch::stack(each(&Expert::up_b))}, 1), rows);
    return swiglu_halves(both);
  };
  auto hidden =
      experts_.front().fc_w.defined() ? torch::gelu(linear(tokens, &Expert::fc_w, &Expert::fc_b), "tanh") : gate_up();
  return linear(hidden, &Expert::proj_w, &Expert::proj_b);
}

torch::Tensor MoELayerImpl::forward(const torch::Tensor& input, bool record) {
  // Under expert tensor parallelism with sequence parallelism every tp rank routes the whole
  // sequence: gathered here (its gradient is the same on every tp rank: each keeps its part), and
  // each keeps its part of the output (whose gradient is gathered back).
  const bool gather = options_.sequence_parallel && options_.expert_tp;
  if (gather)
    return parallel::scatter_to_sequence_region(
        routed(parallel::gather_sequence_to_replicated_region(input, tp_), record), tp_);
  return routed(input, record);
}

torch::Tensor MoELayerImpl::routed(const torch::Tensor& x, bool record) {
  const auto& moe = options_.moe;
  const int64_t h = x.size(-1);
  auto tokens = x.reshape({-1, h});
  const int64_t local_tokens = tokens.size(0);
  auto router_input = tokens;
  if (is_training() && moe.router_jitter > 0) {
    // Under sequence parallelism each tp rank holds other tokens: they draw their own noise.
    c10::optional<at::Generator> generator;
    if (routes_own_part() && options_.split_generator) generator = *options_.split_generator;
    // Drawn on the CPU on every device (parallel/tp_rng.h's reason: the generators checkpoints keep).
    auto noise = torch::empty_like(tokens, tokens.options().device(torch::kCPU))
                     .uniform_(1.0 - moe.router_jitter, 1.0 + moe.router_jitter, generator);
    router_input = tokens * noise.to(tokens.device());
  }
  // DeepSeek-V3's sigmoid router works in fp32 (its biases and group choice are sensitive to bf16
  // rounding); the softmax routers, as Mixtral's and Qwen3-MoE's, in the activations' dtype.
  auto logits = moe.score == "sigmoid" ? torch::linear(router_input.to(torch::kFloat32), router_.to(torch::kFloat32))
                                       : torch::linear(router_input, cast_to_activation(router_, router_input));
  auto router = RouterOptions::of(moe);
  router.bias = stats_.expert_bias;
  Routing routing = route_tokens(logits, router);

  // The auxiliary losses are over the whole sequence: under sequence
  // parallelism each tp rank holds part of it, and under context parallelism
  // each cp rank, so the statistics are summed over both.
  const bool split = routes_own_part() && tp_.size() > 1;
  const int64_t cp = cp_ ? cp_->size() : 1;
  const int64_t all_tokens = (split ? local_tokens * tp_.size() : local_tokens) * cp;
  // Sigmoid scores enter the balance loss normalised per token (DeepSeek-V3's s'_{i,t}).
  const auto scores = moe.score == "sigmoid" ? routing.probs / (routing.probs.sum(-1, true) + 1e-20) : routing.probs;
  // The balance loss's statistics [G, E]: of each sequence (aux_loss_type sequence, G = B) or of
  // the whole micro-batch (G = 1), summed with those of the tp (under SP) and cp ranks holding the
  // other parts of the same sequences; the scores' gradient passes through the sums unchanged.
  const int64_t groups = moe.aux_loss_type == "sequence" ? x.size(0) : 1;
  auto probs_sum = scores.view({groups, -1, moe.num_experts}).sum(1);
  const auto chosen = routing.assignment.experts.reshape({groups, -1});
  const auto fp32 = probs_sum.options().dtype(torch::kFloat32);
  auto counts =
      torch::zeros({groups, moe.num_experts}, fp32).scatter_add_(1, chosen, torch::ones(chosen.sizes(), fp32));
  if (split) {
    probs_sum = parallel::reduce_from_tp_region(probs_sum, tp_);
    tp_.all_reduce(counts).wait();
  }
  if (cp > 1) {
    probs_sum = parallel::reduce_from_tp_region(probs_sum, *cp_);
    cp_->all_reduce(counts).wait();
  }
  // What the training loss gets, and what the metrics report (the batch figure without a loss).
  const auto balance = load_balancing_loss(probs_sum, counts, all_tokens / groups, moe.top_k);
  const double aux_coeff = moe.aux_loss_type == "none" ? 0.0 : moe.aux_loss_coeff;
  auto z = router_z_loss(logits, all_tokens);  // this rank's share: the tp and cp sum is the whole

  auto dispatched = dispatcher_.dispatch(tokens, routing.assignment);
  auto out = dispatcher_.combine(experts(dispatched.tokens, dispatched.tokens_per_expert), dispatched.plan);
  if (is_training() && torch::GradMode::is_enabled() && (aux_coeff > 0 || moe.z_loss_coeff > 0)) {
    // Each cp rank's backward reaches the router through its own tokens only, and gradients are
    // averaged over dp x cp: times cp, the cp ranks' parts add up to the whole sequence's gradient.
    out = AttachLoss::apply(out, (balance * aux_coeff + z * moe.z_loss_coeff) * static_cast<double>(cp),
                            options_.loss_scale);
  }
  if (record) {
    torch::NoGradGuard no_grad;
    // Shares whose sum over all ranks is the global figure: tp replicas count once.
    const bool tokens_mine = split || tp_.rank() == 0;
    stats_.keep_on(balance.device());
    if (tokens_mine) {
      stats_.tokens_per_expert += routing.counts;
      stats_.dropped += routing.dropped;
      stats_.z_loss += z.detach().to(torch::kFloat64);
    }
    if (tp_.rank() == 0 && (!cp_ || cp_->rank() == 0)) {  // the same whole-sequence value on every cp rank
      stats_.aux_loss += balance.detach().to(torch::kFloat64);
      stats_.micro_batches += 1;
    }
  }
  return out.view(x.sizes());
}

std::vector<parallel::ParallelParameter> MoELayerImpl::parallel_parameters() const {
  return parallel::collect_parallel_parameters(*this);
}

}  // namespace loom::models
