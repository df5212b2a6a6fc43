// CRC-32C (Castagnoli), the checksum of TensorBoard's (TFRecord's) record framing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace loom {

// The CRC-32C of N bytes at DATA; pass an earlier result as CRC to continue a checksum across pieces.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

// TFRecord stores the CRC rotated and offset: a CRC computed over data that itself holds CRCs
// would otherwise be easy to match by accident.
inline uint32_t mask_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace loom
