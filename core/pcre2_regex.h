// A compiled PCRE2 pattern in UTF mode with Unicode properties (\p{L}, \s as in
// Oniguruma, which Hugging Face tokenizers use), shared read-only across threads. Its pattern is
// written as Oniguruma reads it (oniguruma_as_pcre2).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace loom {

// PATTERN (Oniguruma's Ruby syntax, as Hugging Face's tokenizers compile it) as a PCRE2 pattern of
// the same meaning: \s as Unicode's White_Space, \w (and \b, \B) as Oniguruma's word characters,
// \h as a hex digit, inline m as PCRE2's s. What it cannot reproduce (POSIX classes, nested
// classes, intersections) is an InputError naming WHAT, not a pattern that splits text otherwise.
// (^ and $ match at lines as in Oniguruma once compiled multiline; Pcre2Regex does so.)
std::string oniguruma_as_pcre2(const std::string& pattern, const std::string& what);

class Pcre2Regex {
 public:
  // WHAT names the pattern's origin for the InputError a bad pattern gives.
  Pcre2Regex(const std::string& pattern, const std::string& what);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // The non-overlapping matches in TEXT, left to right, as byte ranges [begin, end), empty ones
  // too (Oniguruma's order: none empty where the one before ended).
  // Text that is not valid UTF-8 is an InputError.
  std::vector<std::pair<size_t, size_t>> find_all(const std::string& text) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  std::string pattern_, what_;  // for the error of a match that gives up (a pattern that backtracks without end)
};

}  // namespace loom
