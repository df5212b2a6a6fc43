#include "launch/text_stream.h"

namespace loom::launch {

size_t complete_utf8_prefix(const std::string& text) {
  // Looks back over at most 3 continuation bytes (10xxxxxx) for the lead byte of the last character.
  const size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto byte = static_cast<unsigned char>(text[n - back]);
    if ((byte & 0xC0) == 0x80) continue;
    const size_t length = byte < 0x80             ? 1
                          : (byte & 0xE0) == 0xC0 ? 2
                          : (byte & 0xF0) == 0xE0 ? 3
                          : (byte & 0xF8) == 0xF0 ? 4
                                                  : 1;
    return back < length ? n - back : n;
  }
  return n;  // not UTF-8 as far as it can tell: nothing to wait for
}

void TextStream::add(int64_t id) {
  ids_.push_back(id);
  text_ = tokenizer_.decode(ids_);
  // A decoder that writes an incomplete tail as U+FFFD (SentencePiece's byte fallback: <0xC4> alone)
  // replaces it once the next byte piece completes the character: those are held back too.
  const std::string replacement = "\xEF\xBF\xBD";
  size_t end = complete_utf8_prefix(text_);
  while (end >= written_ + replacement.size() &&
         text_.compare(end - replacement.size(), replacement.size(), replacement) == 0)
    end -= replacement.size();
  write_up_to(end);
}

void TextStream::finish() {
  write_up_to(text_.size());
}

void TextStream::write_up_to(size_t end) {
  if (end <= written_) return;
  out_.write(text_.data() + written_, static_cast<std::streamsize>(end - written_));
  out_.flush();
  written_ = end;
}

}  // namespace loom::launch
