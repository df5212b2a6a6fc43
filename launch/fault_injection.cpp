// --inject-fault RANK:STEP:KIND, parsed (launch/commands.h: FaultInjection says what each kind does).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/errors.h"
#include "launch/commands.h"

namespace loom::launch {
namespace {

int64_t whole_number(const std::string& flag, const std::string& text, int64_t min) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < min) {
    throw InputError(flag + " expects an integer of at least " + std::to_string(min) + ", got '" + text + "'");
  }
  return value;
}

}  // namespace

FaultInjection parse_fault(const std::string& text) {
  FaultInjection fault;
  auto first = text.find(':'), second = first == std::string::npos ? first : text.find(':', first + 1);
  if (first == std::string::npos || second == std::string::npos) {
    throw InputError("--inject-fault expects RANK:STEP:KIND, got '" + text + "'");
  }
  fault.rank = static_cast<int>(whole_number("--inject-fault RANK", text.substr(0, first), 0));
  fault.step = whole_number("--inject-fault STEP", text.substr(first + 1, second - first - 1), 1);
  fault.kind = text.substr(second + 1);
  // delay:GROUP:MS, slow-data:MS, straggler:RANK:MS: time planted for loom diagnose.
  auto milliseconds = [&](const std::string& number) {
    char* end = nullptr;
    const double ms = std::strtod(number.c_str(), &end);
    if (number.empty() || *end != '\0' || !(ms >= 0 && ms <= 3.6e6))
      throw InputError("--inject-fault " + text + ": MS must be a number of milliseconds in [0, 3600000]");
    return ms;
  };
  const auto last = fault.kind.rfind(':');
  if (fault.kind.rfind("delay:", 0) == 0 || fault.kind.rfind("straggler:", 0) == 0) {
    const auto colon = fault.kind.find(':');
    if (last == colon) throw InputError("--inject-fault " + text + ": expects delay:GROUP:MS or straggler:RANK:MS");
    const std::string what = fault.kind.substr(colon + 1, last - colon - 1);
    fault.milliseconds = milliseconds(fault.kind.substr(last + 1));
    fault.kind = fault.kind.substr(0, colon);
    if (fault.kind == "straggler") {
      if (whole_number("--inject-fault straggler RANK", what, 0) != fault.rank)
        throw InputError("--inject-fault " + text + ": the straggler is the fault's rank: RANK:STEP:straggler:RANK:MS");
      return fault;
    }
    const std::vector<std::string> groups = {"tp", "cp", "dp", "pp", "ep"};
    if (std::find(groups.begin(), groups.end(), what) == groups.end())
      throw InputError("--inject-fault " + text + ": delay:GROUP:MS needs GROUP tp, cp, dp, pp or ep");
    fault.group = what;
    return fault;
  }
  for (const std::string slow : {"slow_save", "slow_resume"}) {
    if (fault.kind.rfind(slow + ":", 0) != 0) continue;
    if (last != fault.kind.find(':')) throw InputError("--inject-fault " + text + ": expects " + slow + ":MS");
    fault.milliseconds = milliseconds(fault.kind.substr(last + 1));
    fault.kind = slow;
    return fault;
  }
  if (fault.kind.rfind("slow-data:", 0) == 0) {
    if (last != fault.kind.find(':')) throw InputError("--inject-fault " + text + ": expects slow-data:MS");
    fault.milliseconds = milliseconds(fault.kind.substr(last + 1));
    fault.kind = "slow-data";
    return fault;
  }
  // scale:GROUP:EPS: one collective of GROUP has its result scaled by 1 + EPS on the rank.
  if (fault.kind.rfind("scale:", 0) == 0) {
    const auto colon = fault.kind.find(':', 6);
    const std::vector<std::string> groups = {"tp", "cp", "dp", "pp", "ep"};
    fault.group = fault.kind.substr(6, colon == std::string::npos ? std::string::npos : colon - 6);
    if (colon == std::string::npos || std::find(groups.begin(), groups.end(), fault.group) == groups.end()) {
      throw InputError("--inject-fault RANK:STEP:scale:GROUP:EPS needs GROUP tp, cp, dp, pp or ep, got '" + text + "'");
    }
    const std::string eps = fault.kind.substr(colon + 1);
    char* end = nullptr;
    fault.epsilon = std::strtod(eps.c_str(), &end);
    if (eps.empty() || *end != '\0' || !std::isfinite(fault.epsilon) || fault.epsilon <= -1.0) {
      throw InputError("--inject-fault scale:" + fault.group + ":EPS needs a number above -1, got '" + eps + "'");
    }
    fault.kind = "scale";
    return fault;
  }
  const std::vector<std::string> kinds = {"kill", "hang", "kill_in_save", "fail_save", "overflow", "slow"};
  if (std::find(kinds.begin(), kinds.end(), fault.kind) == kinds.end()) {
    throw InputError(
        "--inject-fault KIND must be kill, hang, kill_in_save, fail_save, overflow, slow, scale:GROUP:EPS, "
        "delay:GROUP:MS, slow-data:MS, slow_save:MS, slow_resume:MS or straggler:RANK:MS");
  }
  return fault;
}

}  // namespace loom::launch
