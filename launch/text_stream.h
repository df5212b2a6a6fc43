// The text of generated tokens as they come: each token's new text is written and
// flushed at once, but a tail that is not yet whole UTF-8 (a character whose bytes
// span tokens, as byte-level tokens split them) waits for the token that completes it.
// The whole continuation is decoded every time, so a tokenizer whose pieces join
// (merged spaces, byte fallback) prints what decoding all of it gives.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/tokenizer.h"

namespace loom::launch {

// The length of TEXT's longest prefix that does not end inside an incomplete UTF-8 character.
size_t complete_utf8_prefix(const std::string& text);

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::ostream& out) : tokenizer_(tokenizer), out_(out) {}
  // Adds token ID to the continuation and writes what it completes.
  void add(int64_t id);
  // Writes whatever is held back, whole or not.
  void finish();

 private:
  void write_up_to(size_t end);

  const Tokenizer& tokenizer_;
  std::ostream& out_;
  std::vector<int64_t> ids_;
  std::string text_;
  size_t written_ = 0;  // bytes of text_ written
};

}  // namespace loom::launch
