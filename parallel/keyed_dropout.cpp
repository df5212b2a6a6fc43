#include "parallel/keyed_dropout.h"

#include <cmath>

namespace loom::parallel {
namespace {

constexpr int64_t kLow32 = int64_t{0xffffffff};

// A 32-bit finaliser (xor-shift-multiply) on int64 tensors holding values below 2^32; the
// multipliers stay below 2^31 so that no product leaves int64.
torch::Tensor mix(torch::Tensor x) {
  x = x.bitwise_xor(x.__rshift__(16));
  x = x.mul(int64_t{0x7feb352d}).bitwise_and(kLow32);
  x = x.bitwise_xor(x.__rshift__(15));
  x = x.mul(int64_t{0x2c1b3c6d}).bitwise_and(kLow32);
  return x.bitwise_xor(x.__rshift__(16));
}

}  // namespace

int64_t draw_dropout_key(at::Generator* generator) {
  auto bits = torch::empty({2}, torch::kInt64);
  if (generator) {
    bits.random_(0, int64_t{1} << 31, *generator);
  } else {
    bits.random_(0, int64_t{1} << 31);
  }
  return bits[0].item<int64_t>() << 31 | bits[1].item<int64_t>();
}

torch::Tensor keyed_keep(const torch::Tensor& coordinates, double p, int64_t key) {
  TORCH_CHECK(coordinates.scalar_type() == torch::kInt64, "keyed dropout: int64 coordinates expected");
  auto h = mix(coordinates.bitwise_and(kLow32).bitwise_xor(key & kLow32));
  h = mix(h.bitwise_xor(coordinates.__rshift__(32).add((key >> 32) & kLow32).bitwise_and(kLow32)));
  const auto threshold = static_cast<int64_t>(std::llround(p * 4294967296.0));
  return h.ge(threshold);
}

torch::Tensor keyed_keep_scale(const torch::Tensor& coordinates, double p, int64_t key, torch::ScalarType dtype) {
  return keyed_keep(coordinates, p, key).to(dtype).div_(1.0 - p);
}

torch::Tensor keyed_dropout(const torch::Tensor& x, double p, int64_t key, const torch::Tensor& coordinates) {
  return x * keyed_keep(coordinates, p, key) / (1.0 - p);
}

torch::Tensor attention_coordinates(const AttentionDropout& d, int64_t batch, int64_t heads,
                                    const torch::Tensor& q_positions, const torch::Tensor& k_positions) {
  const auto options = q_positions.options();
  auto b = torch::arange(batch, options).view({-1, 1, 1, 1});
  auto h = torch::arange(d.first_head, d.first_head + heads, options).view({1, -1, 1, 1});
  return ((b * d.total_heads + h) * d.seq_len + q_positions.view({1, 1, -1, 1})) * d.seq_len +
         k_positions.view({1, 1, 1, -1});
}

torch::Tensor attention_keep_scale(const AttentionDropout& d, int64_t batch, int64_t heads,
                                   const torch::Tensor& q_positions, const torch::Tensor& k_positions,
                                   torch::ScalarType dtype) {
  return keyed_keep_scale(attention_coordinates(d, batch, heads, q_positions, k_positions), d.p, d.key, dtype);
}

}  // namespace loom::parallel
