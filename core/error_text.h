// The text of an error as a user reads it at the command-line boundary (launch/exit_on_error.cpp's die).
#pragma once

#include <string>

namespace loom {

// MESSAGE without nlohmann::json's ids ("[json.exception.parse_error.101] "), which name the
// library's exception, not the user's file: what follows them (line, column, what was read) stays.
inline std::string without_json_exception_ids(std::string message) {
  for (auto at = message.find("[json.exception."); at != std::string::npos; at = message.find("[json.exception.", at)) {
    const auto end = message.find("] ", at);
    if (end == std::string::npos) break;
    message.erase(at, end + 2 - at);
  }
  return message;
}

}  // namespace loom
