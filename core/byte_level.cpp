#include "core/byte_level.h"

#include <array>
#include <unordered_map>

namespace loom::byte_level {

namespace {

std::string utf8(uint32_t code) {
  std::string out;
  if (code < 0x80) {
    out.push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (code >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
  return out;
}

// Printable Latin-1 bytes stand for themselves; the others (controls, space, soft hyphen...)
// take the code points from 256 up, in byte order: GPT-2's bytes_to_unicode.
struct Alphabet {
  std::array<std::string, 256> symbols;
  std::unordered_map<std::string, unsigned char> bytes;
  Alphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      symbols[b] = utf8(printable ? b : next++);
      bytes.emplace(symbols[b], static_cast<unsigned char>(b));
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

}  // namespace

size_t utf8_length(unsigned char lead) {
  if (lead >= 0xF0 && lead < 0xF8) return 4;
  if (lead >= 0xE0 && lead < 0xF0) return 3;
  if (lead >= 0xC0 && lead < 0xE0) return 2;
  return 1;
}

const std::string& symbol(unsigned char byte) {
  return alphabet().symbols[byte];
}

std::string encode(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += symbol(static_cast<unsigned char>(c));
  return out;
}

std::string decode(const std::string& text) {
  const auto& table = alphabet().bytes;
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    const std::string character = text.substr(i, n);
    const auto found = table.find(character);
    if (found != table.end()) {
      out.push_back(static_cast<char>(found->second));
    } else {
      out += character;
    }
    i += n;
  }
  return out;
}

}  // namespace loom::byte_level
