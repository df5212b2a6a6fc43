#include "parallel/slurm_hostlist.h"

#include <cctype>
#include <cstdint>

#include "core/errors.h"

namespace loom::parallel {
namespace {

// A mistyped range such as "[1-100000000]" must fail, not fill the memory.
constexpr size_t kMaxHosts = size_t{1} << 20;

struct Parser {
  const std::string& list;
  const std::string& source;

  [[noreturn]] void fail(const std::string& why) const {
    throw InputError(source + "='" + list + "' is not a host list: " + why);
  }

  // The items of a comma-separated list, cutting only at commas outside brackets.
  std::vector<std::string> split_names() const {
    std::vector<std::string> names(1);
    bool in_bracket = false;
    for (char c : list) {
      if (c == '[') {
        if (in_bracket) fail("a '[' inside brackets");
        in_bracket = true;
      } else if (c == ']') {
        if (!in_bracket) fail("a ']' without its '['");
        in_bracket = false;
      }
      if (c == ',' && !in_bracket) {
        names.emplace_back();
      } else {
        names.back() += c;
      }
    }
    if (in_bracket) fail("a '[' without its ']'");
    for (const auto& name : names) {
      if (name.empty()) fail("an empty host name");
    }
    return names;
  }

  std::string number(const std::string& digits) const {
    if (digits.empty() || digits.size() > 9) fail("'" + digits + "' is not a number of 1 to 9 digits in brackets");
    for (char c : digits) {
      if (!std::isdigit(static_cast<unsigned char>(c))) fail("'" + digits + "' in brackets is not a number");
    }
    return digits;
  }

  // "01-03,7" -> 01, 02, 03, 7.
  std::vector<std::string> bracket(const std::string& inside) const {
    std::vector<std::string> values;
    size_t start = 0;
    while (start <= inside.size()) {
      size_t end = inside.find(',', start);
      if (end == std::string::npos) end = inside.size();
      const std::string part = inside.substr(start, end - start);
      const size_t dash = part.find('-');
      const std::string low = number(part.substr(0, dash));
      if (dash == std::string::npos) {
        values.push_back(low);
      } else {
        const int64_t from = std::stoll(low), to = std::stoll(number(part.substr(dash + 1)));
        if (to < from) fail("the range '" + part + "' runs backwards");
        if (static_cast<size_t>(to - from) >= kMaxHosts) fail("the range '" + part + "' is too long");
        for (int64_t v = from; v <= to; ++v) {
          std::string text = std::to_string(v);
          if (text.size() < low.size()) text.insert(0, low.size() - text.size(), '0');
          values.push_back(text);
        }
      }
      start = end + 1;
    }
    return values;
  }

  // One name with any number of brackets, multiplied out into HOSTS.
  void expand_name(const std::string& name, std::vector<std::string>& hosts) const {
    std::vector<std::string> prefixes{""};
    size_t at = 0;
    while (at < name.size()) {
      const size_t open = name.find('[', at);
      const std::string text = name.substr(at, open == std::string::npos ? std::string::npos : open - at);
      for (auto& prefix : prefixes) prefix += text;
      if (open == std::string::npos) break;
      const size_t close = name.find(']', open);
      const auto values = bracket(name.substr(open + 1, close - open - 1));
      std::vector<std::string> grown;
      for (const auto& prefix : prefixes) {
        for (const auto& value : values) {
          grown.push_back(prefix + value);
          if (grown.size() + hosts.size() > kMaxHosts) fail("more than " + std::to_string(kMaxHosts) + " hosts");
        }
      }
      prefixes = std::move(grown);
      at = close + 1;
    }
    hosts.insert(hosts.end(), prefixes.begin(), prefixes.end());
  }
};

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& source) {
  const Parser parser{list, source};
  std::vector<std::string> hosts;
  for (const auto& name : parser.split_names()) parser.expand_name(name, hosts);
  return hosts;
}

}  // namespace loom::parallel
