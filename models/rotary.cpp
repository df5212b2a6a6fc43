#include "models/rotary.h"

#include <algorithm>
#include <cmath>

#include "core/cuda_kernel_args.h"

namespace loom::models {

torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScalingConfig& scaling) {
  auto exponents = torch::arange(0, head_dim, 2, torch::kDouble) / static_cast<double>(head_dim);
  auto inv_freq = torch::pow(theta, -exponents);
  if (scaling.type == RopeScalingKind::llama3) {
    const double original = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_wavelen = original / scaling.low_freq_factor;    // longer than this: scaled
    const double high_wavelen = original / scaling.high_freq_factor;  // shorter than this: kept
    auto wavelen = 2.0 * M_PI / inv_freq;
    auto smooth = (original / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
    auto blended = (1.0 - smooth) * inv_freq / scaling.factor + smooth * inv_freq;
    inv_freq = torch::where(wavelen > low_wavelen, inv_freq / scaling.factor,
                            torch::where(wavelen < high_wavelen, inv_freq, blended));
  }
  if (scaling.type == RopeScalingKind::yarn) {
    // Frequencies turning more than beta_fast times over the original context keep their value,
    // those turning fewer than beta_slow times are divided by factor, a linear ramp between; the
    // ramp's ends are the dimensions of those turn counts, rounded outwards.
    const double d = static_cast<double>(head_dim),
                 original = static_cast<double>(scaling.original_max_position_embeddings);
    auto dimension_of = [&](double turns) {
      return d * std::log(original / (turns * 2.0 * M_PI)) / (2.0 * std::log(theta));
    };
    const double low = std::max(std::floor(dimension_of(scaling.beta_fast)), 0.0);
    double high = std::min(std::ceil(dimension_of(scaling.beta_slow)), d - 1.0);
    if (high == low) high += 0.001;
    auto ramp = ((torch::arange(head_dim / 2, torch::kDouble) - low) / (high - low)).clamp(0.0, 1.0);
    auto kept = 1.0 - ramp;  // the share of each frequency left unscaled
    inv_freq = inv_freq / scaling.factor * (1.0 - kept) + inv_freq * kept;
  }
  return inv_freq;
}

namespace {
double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}
}  // namespace

double rope_attention_factor(const RopeScalingConfig& scaling) {
  if (scaling.type != RopeScalingKind::yarn) return 1.0;
  if (scaling.attention_factor > 0) return scaling.attention_factor;
  if (scaling.mscale > 0 && scaling.mscale_all_dim > 0) {
    return yarn_mscale(scaling.factor, scaling.mscale) / yarn_mscale(scaling.factor, scaling.mscale_all_dim);
  }
  return yarn_mscale(scaling.factor, 1.0);
}

double latent_softmax_scale_factor(const RopeScalingConfig& scaling) {
  if (scaling.type == RopeScalingKind::none || scaling.mscale_all_dim <= 0) return 1.0;
  const double m = yarn_mscale(scaling.factor, scaling.mscale_all_dim);
  return m * m;
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta,
                                 const RopeScalingConfig& scaling, bool interleave)
    : tables_(std::make_shared<Tables>()), interleave_(interleave) {
  // Angles in fp64, then fp32: position * frequency stays exact to fp32's precision at long contexts.
  auto angles =
      torch::outer(torch::arange(max_positions, torch::kDouble), rope_inverse_frequencies(head_dim, theta, scaling));
  auto both = torch::cat({angles, angles}, -1);
  const double factor = rope_attention_factor(scaling);
  tables_->cos32 = (both.cos() * factor).to(torch::kFloat);
  tables_->sin32 = (both.sin() * factor).to(torch::kFloat);
}

namespace {

// x * cos + rotate_half(x) * sin as three kernels each way (one product, then each half's
// multiply-add of the other half), where the composition takes five forward (a negation and a
// concatenation among them) and about ten back (each slice's gradient zero-filled, then summed).
// With x's halves x1, x2 and the gradient's g1, g2:
//   out1 = x1 cos1 - x2 sin1          dx1 = g1 cos1 + g2 sin2
//   out2 = x2 cos2 + x1 sin2          dx2 = g2 cos2 - g1 sin1
// The same products as the composition; in bf16 the multiply-add rounds once, not twice.
torch::Tensor rotate_halves(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto out = x * cos;
  out.narrow(-1, 0, half).addcmul_(x.narrow(-1, half, half), sin.narrow(-1, 0, half), -1);
  out.narrow(-1, half, half).addcmul_(x.narrow(-1, 0, half), sin.narrow(-1, half, half));
  return out;
}

// Whether loom's CUDA kernel (core/cuda_kernels/rotary.cu) takes X [B, S, H, D] (last dimension
// contiguous) with COS and SIN [S, 1, D] of X's type, each position's row of D contiguous.
bool kernel_takes(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (x.dim() != 4 || x.stride(3) != 1 || x.size(3) % 2 != 0 || !cuda::kernels_take(x.device(), x.scalar_type()))
    return false;
  for (const auto& table : {cos, sin}) {
    if (table.dim() != 3 || table.scalar_type() != x.scalar_type() || table.device() != x.device() ||
        table.size(0) != x.size(1) || table.size(1) != 1 || table.size(2) != x.size(3) ||
        table.stride(0) != x.size(3) || table.stride(2) != 1)
      return false;
  }
  return true;
}

// The rotation (or, BACKWARD, the gradient's rotation back) in one kernel, into a contiguous tensor.
torch::Tensor rotate_in_kernel(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                               bool backward) {
  const c10::DeviceGuard guard(x.device());
  auto out = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
  const cuda::RotaryShape shape{x.size(0), x.size(1), x.size(2), x.size(3), x.stride(0), x.stride(1), x.stride(2)};
  cuda::rotary(x.data_ptr(), shape, cos.data_ptr(), sin.data_ptr(), *cuda::storage_of(x.scalar_type()), backward,
               out.data_ptr(), cuda::current_stream(x.device()));
  return out;
}

torch::Tensor rotate_halves_forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return kernel_takes(x, cos, sin) ? rotate_in_kernel(x, cos, sin, false) : rotate_halves(x, cos, sin);
}

struct RotateHalves : torch::autograd::Function<RotateHalves> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotate_halves_forward(x, cos, sin);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &cos = saved[0], &sin = saved[1];
    const auto& g = grads[0].stride(-1) == 1 ? grads[0] : grads[0].contiguous();
    if (kernel_takes(g, cos, sin)) return {rotate_in_kernel(g, cos, sin, true), torch::Tensor(), torch::Tensor()};
    const int64_t half = g.size(-1) / 2;
    auto dx = g * cos;
    dx.narrow(-1, 0, half).addcmul_(g.narrow(-1, half, half), sin.narrow(-1, half, half));
    dx.narrow(-1, half, half).addcmul_(g.narrow(-1, 0, half), sin.narrow(-1, 0, half), -1);
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor RotaryEmbedding::rotate(const torch::Tensor& x, const torch::Tensor& cos,
                                      const torch::Tensor& sin) const {
  if (!interleave_) {
    if (x.requires_grad() && torch::GradMode::is_enabled()) return RotateHalves::apply(x, cos, sin);
    return rotate_halves_forward(x, cos, sin);
  }
  // Pairs (x0, x1), (x2, x3), ...: the even features, then the odd ones, rotated as rotate-half's halves.
  auto halves = x.unflatten(-1, {x.size(-1) / 2, 2}).transpose(-1, -2).flatten(-2);
  return halves * cos + rotate_half(halves) * sin;
}

RotaryEmbedding::Tables& RotaryEmbedding::tables_like(const torch::Tensor& x) const {
  auto& t = *tables_;
  if (!t.cos.defined() || t.cos.device() != x.device() || t.cos.scalar_type() != x.scalar_type()) {
    t.cos = t.cos32.to(x.device(), x.scalar_type());
    t.sin = t.sin32.to(x.device(), x.scalar_type());
  }
  return t;
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, int64_t first_position) const {
  const int64_t s = x.size(1);
  TORCH_CHECK(first_position + s <= tables_->cos32.size(0), "rotary embedding: positions up to ", first_position + s,
              " but only ", tables_->cos32.size(0), " were prepared");
  auto& t = tables_like(x);
  auto cos = t.cos.narrow(0, first_position, s).unsqueeze(1);  // [S, 1, d]
  auto sin = t.sin.narrow(0, first_position, s).unsqueeze(1);
  return rotate(x, cos, sin);
}

torch::Tensor RotaryEmbedding::apply_at(const torch::Tensor& x, const torch::Tensor& positions) const {
  auto& t = tables_like(x);
  auto cos = t.cos.index_select(0, positions).unsqueeze(1);  // [S, 1, d]
  auto sin = t.sin.index_select(0, positions).unsqueeze(1);
  return rotate(x, cos, sin);
}

}  // namespace loom::models
