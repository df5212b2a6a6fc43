#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace loom {

namespace {

// The reflected Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPolynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ kPolynomial : crc >> 1;
    table[byte] = crc;
  }
  return table;
}

// Built by the compiler: a constant, not state.
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc32c_table(const unsigned char* bytes, size_t n, uint32_t crc) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// SSE 4.2's crc32 instruction computes this very CRC, 8 bytes at a time: some 20 times the table's
// speed (a model's weights are digested at start-up: launch/weight_agreement.h).
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* bytes, size_t n, uint32_t crc) {
  uint64_t state = crc;
  for (; n >= 8; bytes += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, bytes, 8);
    state = _mm_crc32_u64(state, word);
  }
  crc = static_cast<uint32_t>(state);
  for (; n > 0; ++bytes, --n) crc = _mm_crc32_u8(crc, *bytes);
  return crc;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* bytes = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware) return ~crc32c_sse42(bytes, n, ~crc);
#endif
  return ~crc32c_table(bytes, n, ~crc);
}

}  // namespace loom
