// The table of every config key: one place that knows each key's name, type and
// storage, so that parsing, overrides, suggestions and dumping never disagree.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/config.h"

namespace loom {

struct ConfigField {
  std::string section;
  std::string key;
  std::string type;  // int | float | bool | string, for messages
  std::string help;  // one line: what the key means (`loom train --help`)
  // Parses a scalar's text into the field; returns false if the text is not of the field's type.
  std::function<bool(Config&, const std::string&)> parse;
  std::function<std::string(const Config&)> print;

  std::string name() const { return section + "." + key; }
};

const std::vector<ConfigField>& config_fields();

// Every key with its type, default (as Config{} prints it) and meaning, one per line:
// the key table of `loom train --help`, generated from config_fields() so it cannot drift.
std::string config_keys_help();

// The known name closest to NAME (edit distance), for "did you mean" hints.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace loom
