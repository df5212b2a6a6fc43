#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/cpu_threads.h"

namespace loom::optim {

namespace {

// Parameters that can move into one flat buffer: contiguous fp32 on one device,
// each the sole user of its storage (parallel::each_owns_its_storage).
bool flattenable(const std::vector<torch::Tensor>& params) {
  if (params.empty()) return false;
  for (const auto& p : params) {
    if (p.scalar_type() != torch::kFloat || !p.is_contiguous() || p.device() != params.front().device()) return false;
  }
  return parallel::each_owns_its_storage(params);
}

}  // namespace

AdamW::AdamW(std::vector<torch::Tensor> params, AdamWOptions options) : params_(std::move(params)), options_(options) {
  for (const auto& p : params_) decay_.push_back(p.dim() >= 2);
  if (!flattenable(params_)) {
    for (const auto& p : params_) {
      exp_avg_.push_back(torch::zeros_like(p));
      exp_avg_sq_.push_back(torch::zeros_like(p));
    }
    return;
  }
  torch::NoGradGuard no_grad;
  position_.resize(params_.size());
  std::vector<int64_t> numels;
  for (const bool decayed : {true, false}) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (decay_[i] != decayed) continue;
      position_[i] = numels.size();
      numels.push_back(params_[i].numel());
      if (decayed) decayed_numel_ += params_[i].numel();
    }
  }
  layout_ = parallel::FlatLayout(std::move(numels));
  const int64_t total = layout_.padded();
  flat_params_ = torch::empty({total}, params_.front().options());
  flat_exp_avg_ = torch::zeros({total}, params_.front().options());
  flat_exp_avg_sq_ = torch::zeros({total}, params_.front().options());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    auto view = slot(flat_params_, i);
    view.copy_(p.detach());
    p.set_data(view);
    exp_avg_.push_back(slot(flat_exp_avg_, i));
    exp_avg_sq_.push_back(slot(flat_exp_avg_sq_, i));
  }
}

void AdamW::use_flat_gradients() {
  if (!flat()) return;
  torch::NoGradGuard no_grad;
  flat_grads_ = torch::zeros_like(flat_params_);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    auto view = slot(flat_grads_, i);
    if (p.grad().defined()) view.copy_(p.grad());
    p.mutable_grad() = view;
  }
}

torch::Tensor AdamW::slot(const torch::Tensor& flat, size_t i) const {
  return layout_.view(flat, position_[i], params_[i].sizes());
}

bool AdamW::gradients_are_flat() const {
  if (!flat_grads_.defined()) return false;
  const auto* base = static_cast<const char*>(flat_grads_.data_ptr());
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& g = params_[i].grad();
    // Someone may have put a gradient of their own in place of the view (a test, a user's code).
    if (!g.defined() || g.data_ptr() != base + layout_.offset(position_[i]) * static_cast<int64_t>(sizeof(float))) {
      return false;
    }
  }
  return true;
}

namespace {

// Elements per piece of the fused update: below this a tensor is updated on the calling thread
// (a thread per small tensor cost ~4% of a step on the 2-core machine's default GPT).
constexpr int64_t kPieceElements = 1 << 18;

// One piece of the fused update below. A function of its own with restrict pointers (and
// -fno-math-errno for this file, CMakeLists.txt) so that the compiler vectorises the loop.
void adamw_piece(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                 float decay_factor, float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
                 float bias2_sqrt, float eps, float step_size) {
  for (int64_t i = 0; i < n; ++i) {
    const float grad = g[i];
    const float exp_avg = m[i] * beta1 + grad * one_minus_beta1;
    const float exp_avg_sq = v[i] * beta2 + one_minus_beta2 * grad * grad;
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    p[i] = p[i] * decay_factor - step_size * (exp_avg / (std::sqrt(exp_avg_sq) / bias2_sqrt + eps));
  }
}

// The update of fp32 tensors in one pass over memory (the unfused form below reads
// and writes them seven times), in pieces on the rank's threads.
void fused_adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float decay_factor, float beta1,
                        float one_minus_beta1, float beta2, float one_minus_beta2, float bias2_sqrt, float eps,
                        float step_size) {
  parallel_over_threads((n + kPieceElements - 1) / kPieceElements, [&](int64_t begin, int64_t end) {
    // Piece by piece, whichever thread takes them: the vectorised loop and its tail fall at the
    // same elements on any number of threads.
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t first = piece * kPieceElements, count = std::min(n - first, kPieceElements);
      adamw_piece(p + first, g + first, m + first, v + first, count, decay_factor, beta1, one_minus_beta1, beta2,
                  one_minus_beta2, bias2_sqrt, eps, step_size);
    }
  });
}

bool fusable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat && t.is_contiguous() && t.is_cpu();
}

bool gpu_fusable(const torch::Tensor& p, const torch::Tensor& g) {
  return p.is_cuda() && p.scalar_type() == torch::kFloat && g.scalar_type() == torch::kFloat;
}

// On GPUs LibTorch 2.x has the same update as one multi-tensor kernel: it decays
// by 1 - lr * WEIGHT_DECAY, as above, and reads the step count from a tensor
// (read, never written: one serves every parameter).
void gpu_fused_adamw(at::TensorList p, at::TensorList g, at::TensorList m, at::TensorList v, double lr, int64_t step,
                     double weight_decay, const AdamWOptions& options) {
  if (p.empty()) return;
  const std::vector<torch::Tensor> steps(p.size(), torch::full({}, static_cast<double>(step), p.front().options()));
  at::_fused_adamw_(p, g, m, v, {}, steps, lr, options.beta1, options.beta2, weight_decay, options.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
}

}  // namespace

void adamw_update(torch::Tensor p, const torch::Tensor& g, torch::Tensor m, torch::Tensor v, bool decay, double lr,
                  int64_t step, const AdamWOptions& options) {
  const double bias1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  const double decay_factor = decay && options.weight_decay != 0.0 ? 1.0 - lr * options.weight_decay : 1.0;
  if (fusable(p) && fusable(g) && fusable(m) && fusable(v)) {
    TORCH_CHECK(g.numel() == p.numel() && m.numel() == p.numel() && v.numel() == p.numel(),
                "adamw_update: parameter, gradient and moments differ in size");
    // 1 - beta in double, as the unfused form's scalars are, then rounded once.
    fused_adamw_update(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), p.numel(),
                       static_cast<float>(decay_factor), static_cast<float>(options.beta1),
                       static_cast<float>(1.0 - options.beta1), static_cast<float>(options.beta2),
                       static_cast<float>(1.0 - options.beta2), static_cast<float>(bias2_sqrt),
                       static_cast<float>(options.eps), static_cast<float>(step_size));
    // Written through raw pointers: tell autograd's version counters, as in-place ops would.
    for (auto* t : {&p, &m, &v}) torch::autograd::impl::bump_version(*t);
    return;
  }
  if (gpu_fusable(p, g)) {
    gpu_fused_adamw({p}, {g}, {m}, {v}, lr, step, decay ? options.weight_decay : 0.0, options);
    return;
  }
  if (decay_factor != 1.0) p.mul_(decay_factor);
  m.mul_(options.beta1).add_(g, 1.0 - options.beta1);
  v.mul_(options.beta2).addcmul_(g, g, 1.0 - options.beta2);
  auto denom = (v.sqrt() / bias2_sqrt).add_(options.eps);
  p.addcdiv_(m, denom, -step_size);
}

namespace {

// GPUs: all fp32 parameters in two multi-tensor kernel launches (decayed and not),
// rather than one launch per tensor. False when some tensor does not qualify.
bool step_on_gpu_at_once(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& exp_avg,
                         const std::vector<torch::Tensor>& exp_avg_sq, const std::vector<bool>& decay, double lr,
                         int64_t step, const AdamWOptions& options) {
  std::vector<torch::Tensor> p[2], g[2], m[2], v[2];  // [0]: not decayed, [1]: decayed
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& param = params[i];
    if (!param.grad().defined()) continue;
    if (!gpu_fusable(param, param.grad())) return false;
    const int group = decay[i] ? 1 : 0;
    p[group].push_back(param);
    g[group].push_back(param.grad());
    m[group].push_back(exp_avg[i]);
    v[group].push_back(exp_avg_sq[i]);
  }
  gpu_fused_adamw(p[0], g[0], m[0], v[0], lr, step, 0.0, options);
  gpu_fused_adamw(p[1], g[1], m[1], v[1], lr, step, options.weight_decay, options);
  return true;
}

}  // namespace

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  if (gradients_are_flat()) {
    const int64_t total = flat_params_.numel();
    for (const bool decayed : {true, false}) {
      const int64_t begin = decayed ? 0 : decayed_numel_, count = decayed ? decayed_numel_ : total - decayed_numel_;
      if (count == 0) continue;
      adamw_update(flat_params_.narrow(0, begin, count), flat_grads_.narrow(0, begin, count),
                   flat_exp_avg_.narrow(0, begin, count), flat_exp_avg_sq_.narrow(0, begin, count), decayed, lr, steps_,
                   options_);
    }
    // The parameters keep version counters of their own (set_data): tell them too.
    for (auto& p : params_) torch::autograd::impl::bump_version(p);
    return;
  }
  if (!params_.empty() && params_.front().is_cuda() &&
      step_on_gpu_at_once(params_, exp_avg_, exp_avg_sq_, decay_, lr, steps_, options_)) {
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    adamw_update(p, p.grad(), exp_avg_[i], exp_avg_sq_[i], decay_[i], lr, steps_, options_);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    bytes += (exp_avg_[i].numel() + exp_avg_sq_[i].numel()) * static_cast<int64_t>(exp_avg_[i].element_size());
  }
  return bytes;
}

void AdamW::set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  exp_avg_[i].copy_(exp_avg);
  exp_avg_sq_[i].copy_(exp_avg_sq);
}

void AdamW::zero_grad() {
  if (gradients_are_flat()) {
    flat_grads_.zero_();
    return;
  }
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace loom::optim
