#include "core/muon_groups.h"

#include "core/errors.h"

namespace loom {

bool name_matches(const std::string& pattern, const std::string& name) {
  // Greedy glob with backtracking to the last '*': linear for one star, fine for a few.
  size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> name_patterns(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    auto item = list.substr(start, end - start);
    const auto first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(item.substr(first, last - first + 1));
    start = end + 1;
  }
  return out;
}

bool muon_trains(const MuonConfig& muon, const std::string& name, int64_t dims) {
  for (const auto& pattern : name_patterns(muon.exclude)) {
    if (name_matches(pattern, name)) return false;
  }
  for (const auto& pattern : name_patterns(muon.include)) {
    if (!name_matches(pattern, name)) continue;
    if (dims != 2) {
      throw InputError("config key 'train.muon.include': '" + pattern + "' matches " + name + ", which has " +
                       std::to_string(dims) + " dimension(s); Muon trains matrices only");
    }
    return true;
  }
  return name.rfind("h.", 0) == 0 && dims == 2 && name.find("router") == std::string::npos;
}

}  // namespace loom
