#include "core/data_blend.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/errors.h"

namespace loom {
namespace {

bool parse_number(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0' && std::isfinite(out);
}

}  // namespace

std::vector<BlendComponent> parse_blend(const std::string& spec, const std::string& key) {
  std::istringstream in(spec);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  // Empty means the synthetic corpus; blanks alone are a path gone missing (an unset variable).
  if (words.empty() && !spec.empty()) throw InputError("config key '" + key + "' holds only blanks");
  if (words.empty()) return {};
  if (words.size() == 1) return {{1.0, words[0]}};
  // A dataset whose path holds a blank ("my data/corpus") is one prefix, not a blend.
  if (std::error_code error; std::filesystem::exists(spec + ".idx", error)) return {{1.0, spec}};
  if (words.size() % 2 != 0) {
    throw InputError("config key '" + key + "': a blend is weight and prefix pairs (\"0.3 A 0.7 B\"), got " +
                     std::to_string(words.size()) + " words in '" + spec + "'");
  }
  std::vector<BlendComponent> blend;
  double total = 0.0;
  for (size_t i = 0; i < words.size(); i += 2) {
    double weight = 0.0;
    if (!parse_number(words[i], weight) || weight <= 0.0) {
      throw InputError("config key '" + key + "': '" + words[i] + "' (before '" + words[i + 1] +
                       "') is not a positive weight; a blend is \"W1 PREFIX1 W2 PREFIX2 ...\"");
    }
    blend.push_back({weight, words[i + 1]});
    total += weight;
  }
  if (!std::isfinite(total)) {  // dividing by an infinite sum would make every weight 0: an even blend by accident
    throw InputError("config key '" + key + "': the weights in '" + spec +
                     "' add up to more than a double holds; give them on a smaller scale (they are relative)");
  }
  for (auto& component : blend) component.weight /= total;
  return blend;
}

DataSplit parse_split(const std::string& spec, const std::string& key) {
  std::vector<double> parts;
  std::string text = spec;
  for (char& c : text) {
    if (c == '/') c = ',';  // Megatron-LM also accepts 969/30/1
  }
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    // Spaces around the numbers are fine.
    const auto first = part.find_first_not_of(' ');
    const auto last = part.find_last_not_of(' ');
    part = first == std::string::npos ? "" : part.substr(first, last - first + 1);
    double value = 0.0;
    if (!parse_number(part, value) || value < 0.0) {
      throw InputError("config key '" + key + "': '" + spec +
                       "' is not a split; give up to three non-negative weights TRAIN,VALID,TEST such as 969,30,1");
    }
    parts.push_back(value);
  }
  if (parts.empty() || parts.size() > 3) {
    throw InputError("config key '" + key + "': '" + spec + "' must give one to three weights TRAIN,VALID,TEST");
  }
  parts.resize(3, 0.0);
  const double total = parts[0] + parts[1] + parts[2];
  if (!std::isfinite(total)) {
    throw InputError("config key '" + key + "': the weights in '" + spec +
                     "' add up to more than a double holds; give them on a smaller scale (they are relative)");
  }
  if (parts[0] <= 0.0) {
    throw InputError("config key '" + key + "': '" + spec + "' leaves nothing to train on (the first weight is 0)");
  }
  return {parts[0] / total, parts[1] / total, parts[2] / total};
}

}  // namespace loom
