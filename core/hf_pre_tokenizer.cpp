#include "core/hf_pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/pcre2_regex.h"

namespace loom {

namespace {

// GPT-2's pattern, as the ByteLevel pre-tokenizer of Hugging Face tokenizers uses it.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct Segment {
  size_t begin, end;
  bool is_match;
};

// Whole-piece segments from match ranges: the gaps between matches become non-matches.
std::vector<Segment> segments(const std::vector<std::pair<size_t, size_t>>& matches, size_t size, bool invert) {
  std::vector<Segment> out;
  size_t at = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > at) out.push_back({at, begin, invert});
    out.push_back({begin, end, !invert});
    at = end;
  }
  if (at < size) out.push_back({at, size, invert});
  return out;
}

// Hugging Face's SplitDelimiterBehavior applied to SEGMENTS of PIECE.
void cut(const std::string& piece, std::vector<Segment> segs, Behavior behavior, std::vector<std::string>& out) {
  std::vector<Segment> merged;
  switch (behavior) {
    case Behavior::removed:
      for (const auto& s : segs)
        if (!s.is_match) merged.push_back(s);
      break;
    case Behavior::isolated: merged = segs; break;
    case Behavior::merged_with_previous: {
      bool previous_match = false;
      for (const auto& s : segs) {
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::merged_with_next: {
      bool previous_match = false;
      for (auto s = segs.rbegin(); s != segs.rend(); ++s) {
        if (s->is_match && !previous_match && !merged.empty()) {
          merged.back().begin = s->begin;
        } else {
          merged.push_back(*s);
        }
        previous_match = s->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case Behavior::contiguous:
      for (const auto& s : segs) {
        if (!merged.empty() && merged.back().is_match == s.is_match) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
      }
      break;
  }
  for (const auto& s : merged)
    if (s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
}

Behavior parse_behavior(const nlohmann::json& step, const std::string& where) {
  const std::string name = step.value("behavior", std::string("Isolated"));
  if (name == "Removed") return Behavior::removed;
  if (name == "Isolated") return Behavior::isolated;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  throw InputError(where + ": pre_tokenizer Split has an unknown behavior '" + name + "'");
}

std::string escape_literal(const std::string& text) {
  std::string out = "\\Q";
  for (size_t i = 0; i < text.size(); ++i) {
    // \E inside \Q...\E would end the quote early: split it.
    if (text.compare(i, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out.push_back(text[i]);
    }
  }
  return out + "\\E";
}

class RegexSplit : public PreTokenizerStep {
 public:
  RegexSplit(const std::string& pattern, Behavior behavior, bool invert, const std::string& what)
      : regex_(pattern, what), behavior_(behavior), invert_(invert) {}
  std::vector<std::string> apply(const std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    for (const auto& piece : pieces)
      cut(piece, segments(regex_.find_all(piece), piece.size(), invert_), behavior_, out);
    return out;
  }

 private:
  Pcre2Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// ByteLevel's own part of the cut: a space before each piece (add_prefix_space), then GPT-2's regex.
class ByteLevelSplit : public PreTokenizerStep {
 public:
  ByteLevelSplit(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<RegexSplit>(kGpt2Pattern, Behavior::isolated, false, where);
  }
  std::vector<std::string> apply(const std::vector<std::string>& pieces) const override {
    std::vector<std::string> prefixed;
    for (const auto& piece : pieces) {
      if (piece.empty()) continue;
      prefixed.push_back(add_prefix_space_ && piece[0] != ' ' ? " " + piece : piece);
    }
    return regex_ ? regex_->apply(prefixed) : prefixed;
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<RegexSplit> regex_;
};

}  // namespace

HfPreTokenizer::HfPreTokenizer(const nlohmann::json& config, const std::string& where) {
  if (config.is_null()) return;
  std::vector<nlohmann::json> steps;
  if (config.value("type", std::string()) == "Sequence") {
    for (const auto& step : config.at("pretokenizers")) steps.push_back(step);
  } else {
    steps.push_back(config);
  }
  for (const auto& step : steps) {
    const std::string type = step.value("type", std::string());
    if (byte_level_) {
      throw InputError(where + ": pre_tokenizer " + type +
                       " after ByteLevel is not supported (ByteLevel must come last)");
    }
    if (type == "ByteLevel") {
      steps_.push_back(
          std::make_unique<ByteLevelSplit>(step.value("add_prefix_space", true), step.value("use_regex", true), where));
      byte_level_ = true;
    } else if (type == "Split") {
      const auto& pattern = step.at("pattern");
      std::string regex;
      if (pattern.contains("Regex")) {
        regex = pattern.at("Regex").get<std::string>();
      } else if (pattern.contains("String")) {
        regex = escape_literal(pattern.at("String").get<std::string>());
      } else {
        throw InputError(where + ": pre_tokenizer Split's pattern has neither 'Regex' nor 'String'");
      }
      steps_.push_back(std::make_unique<RegexSplit>(regex, parse_behavior(step, where), step.value("invert", false),
                                                    where + " (pre_tokenizer Split)"));
    } else if (type == "Digits") {
      const bool each = step.value("individual_digits", false);
      steps_.push_back(std::make_unique<RegexSplit>(each ? R"(\p{N})" : R"(\p{N}+)", Behavior::isolated, false,
                                                    where + " (pre_tokenizer Digits)"));
    } else {
      throw InputError(where + ": pre_tokenizer type '" + type +
                       "' is not supported (supported: ByteLevel, Split, Digits and a Sequence of them)");
    }
  }
}

HfPreTokenizer::~HfPreTokenizer() = default;

std::vector<std::string> HfPreTokenizer::split(const std::string& text) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const auto& step : steps_) pieces = step->apply(pieces);
  return pieces;
}

}  // namespace loom
