// GPT-2's byte-level alphabet: each byte is shown as one printable Unicode
// character, so that a byte-level BPE vocabulary is made of ordinary strings.
#pragma once

#include <cstddef>
#include <string>

namespace loom::byte_level {

// BYTES with each byte replaced by its character (UTF-8 encoded).
std::string encode(const std::string& bytes);
// The inverse of encode; characters outside the alphabet are kept as they are.
std::string decode(const std::string& text);
// The character standing for BYTE, UTF-8 encoded.
const std::string& symbol(unsigned char byte);
// The length in bytes of the UTF-8 character starting with LEAD (1 for a stray byte).
size_t utf8_length(unsigned char lead);

}  // namespace loom::byte_level
