#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/pcre2_regex.h"

#include <pcre2.h>

#include <memory>
#include <optional>

#include "core/errors.h"

namespace loom {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Pcre2Regex::Pcre2Regex(const std::string& pattern, const std::string& what) : pattern_(pattern), what_(what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                        &offset, nullptr);
  if (code_ == nullptr) {
    throw InputError(what + ": the regex '" + pattern + "' does not compile at offset " + std::to_string(offset) +
                     ": " + pcre2_message(error));
  }
  // JIT is a speed-up only; without it (some platforms) the interpreter gives the same matches.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Pcre2Regex::~Pcre2Regex() {
  pcre2_code_free(code_);
}

std::vector<std::pair<size_t, size_t>> Pcre2Regex::find_all(const std::string& text) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  std::vector<std::pair<size_t, size_t>> matches;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  uint32_t options = 0;
  // Empty matches count, as in Hugging Face's tokenizers (Oniguruma's find_iter): a Split whose
  // pattern can match nothing cuts the text there. As there, an empty match where the previous
  // match ended is passed over, the search going on one character later.
  std::optional<size_t> previous_end;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), start, options, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
        throw InputError("the text is not valid UTF-8 (" + pcre2_message(rc) + ")");
      }
      // A resource limit (JIT stack, match or depth limit): the pattern backtracks without end on
      // this text, which is the tokenizer file's doing, not loom's.
      throw InputError(what_ + ": the regex '" + pattern_ + "' gave up matching a text of " +
                       std::to_string(text.size()) + " bytes (" + pcre2_message(rc) + ")");
    }
    // The subject was validated by the first call; later calls start on character boundaries.
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* vector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = vector[0], end = vector[1];
    if (end == begin && previous_end == end) {
      // Step over one whole character so the next search starts on a boundary.
      start = end + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    matches.emplace_back(begin, end);
    previous_end = end;
    start = end;
  }
  return matches;
}

}  // namespace loom
