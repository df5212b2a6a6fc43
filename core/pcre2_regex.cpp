#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/pcre2_regex.h"

#include <pcre2.h>

#include <algorithm>
#include <cctype>
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

// Unicode's White_Space, Oniguruma's \s: PCRE2's \s (\p{Z}, \h, \v) also holds U+180E, which
// left White_Space in Unicode 6.3.
constexpr const char* kSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's \w under Unicode (letters and other alphabetic, marks, decimal digits, connector
// punctuation, the joiners), where PCRE2's is letters, numbers and '_'.
constexpr const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";
constexpr const char* kHex = "0-9A-Fa-f";  // Oniguruma's \h (PCRE2's is horizontal space)

}  // namespace

std::string oniguruma_as_pcre2(const std::string& pattern, const std::string& what) {
  const auto refuse = [&](const std::string& construct) {
    throw InputError(what + ": the regex '" + pattern + "' uses " + construct +
                     ", whose meaning in Oniguruma (Hugging Face's tokenizers) loom cannot reproduce exactly");
  };
  const std::string word = std::string("[") + kWord + "]", not_word = std::string("[^") + kWord + "]";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 'Q') {  // \Q...\E: literal text, copied as it is
        const auto end = pattern.find("\\E", i);
        out += pattern.substr(i - 1, end == std::string::npos ? std::string::npos : end + 2 - (i - 1));
        if (end == std::string::npos) break;
        i = end + 1;
      } else if (e == 's' || e == 'w' || e == 'h') {
        const std::string set = e == 's' ? kSpace : e == 'w' ? kWord : kHex;
        out += in_class ? set : "[" + set + "]";
      } else if ((e == 'S' || e == 'W' || e == 'H') && !in_class) {
        out += std::string("[^") + (e == 'S' ? kSpace : e == 'W' ? kWord : kHex) + "]";
      } else if (e == 'W' || e == 'H') {
        refuse(std::string("\\") + e + " inside a character class");
      } else if (e == 'v') {  // Oniguruma's is the vertical tab alone (PCRE2's: all vertical space)
        out += "\\x{0B}";
      } else if (e == 'u' && i + 4 < pattern.size() &&
                 std::all_of(pattern.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                             pattern.begin() + static_cast<std::ptrdiff_t>(i) + 5,
                             [](unsigned char h) { return std::isxdigit(h); })) {
        out += "\\x{" + pattern.substr(i + 1, 4) + "}";  // \uHHHH, which PCRE2 does not read
        i += 4;
      } else if ((e == 'b' || e == 'B') && !in_class) {  // a word boundary by Oniguruma's \w
        out += e == 'b' ? "(?:(?<=" + word + ")(?!" + word + ")|(?<!" + word + ")(?=" + word + "))"
                        : "(?:(?<=" + word + ")(?=" + word + ")|(?<!" + word + ")(?!" + word + "))";
      } else {
        out += c;
        out += e;
      }
    } else if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a literal ']' first
    } else if (c == '[' && in_class) {
      refuse(i + 1 < pattern.size() && pattern[i + 1] == ':' ? "a POSIX class ([:name:])" : "a nested class");
    } else if (c == ']' && in_class) {
      in_class = false;
      out += c;
    } else if (c == '&' && in_class && i + 1 < pattern.size() && pattern[i + 1] == '&') {
      refuse("a class intersection (&&)");
    } else if (c == '(' && !in_class && pattern.compare(i, 2, "(?") == 0) {
      // Inline options: Oniguruma's (Ruby's) m is PCRE2's s (a dot that matches a newline).
      out += "(?";
      for (i += 2; i < pattern.size() && (std::isalpha(static_cast<unsigned char>(pattern[i])) || pattern[i] == '-');
           ++i)
        out += pattern[i] == 'm' ? 's' : pattern[i];
      --i;
    } else {
      out += c;
    }
  }
  return out;
}

Pcre2Regex::Pcre2Regex(const std::string& pattern, const std::string& what) : pattern_(pattern), what_(what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // As Oniguruma's Ruby syntax: ^ and $ at every line's start and end (a newline is \n).
  const std::string translated = oniguruma_as_pcre2(pattern, what);
  std::unique_ptr<pcre2_compile_context, decltype(&pcre2_compile_context_free)> context(
      pcre2_compile_context_create(nullptr), &pcre2_compile_context_free);
  pcre2_set_newline(context.get(), PCRE2_NEWLINE_LF);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, context.get());
  if (code_ == nullptr) {
    throw InputError(what + ": the regex '" + pattern + "' does not compile" +
                     (translated == pattern ? "" : " (as PCRE2's '" + translated + "')") + " at offset " +
                     std::to_string(offset) + ": " + pcre2_message(error));
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
