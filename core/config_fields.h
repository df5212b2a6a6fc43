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
  // Parses a scalar's text into the field; returns false if the text is not of the field's type.
  std::function<bool(Config&, const std::string&)> parse;
  std::function<std::string(const Config&)> print;

  std::string name() const { return section + "." + key; }
};

const std::vector<ConfigField>& config_fields();

// The known name closest to NAME (edit distance), for "did you mean" hints.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace loom
