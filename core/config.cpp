#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/config_aliases.h"
#include "core/config_fields.h"
#include "core/errors.h"
#include "core/hf_config.h"

namespace loom {
namespace {

std::vector<std::string> all_names() {
  std::vector<std::string> names;
  for (const auto& f : config_fields()) names.push_back(f.name());
  return names;
}

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const auto& f : config_fields()) {
    if (std::find(names.begin(), names.end(), f.section) == names.end()) names.push_back(f.section);
  }
  return names;
}

// "unknown key 'NAME'; did you mean ...?": Megatron-LM's name for the key if NAME is one, else the closest candidate.
std::string unknown(const std::string& what, const std::string& name, const std::vector<std::string>& candidates) {
  const std::string megatron = megatron_hint(name);
  if (!megatron.empty()) return "unknown key '" + name + "'; " + megatron;
  return "unknown " + what + " '" + name + "'; did you mean '" + closest_name(name, candidates) + "'?";
}

const ConfigField& find_field(const std::string& name, const std::string& where) {
  for (const auto& f : config_fields()) {
    if (f.name() == name) return f;
  }
  throw InputError(where + unknown("key", name, all_names()));
}

// What a value of TYPE (a ConfigField's) is written as, for the message refusing one that is not.
std::string written_as(const std::string& type) {
  if (type == "int") return "an integer";
  if (type == "float") return "a finite number";
  if (type == "bool") return "a boolean (true or false; yes, no, on, off, 1 and 0 too)";
  if (type == "list of ints") return "a list of integers";
  return "a " + type;
}

void set_field(Config& config, const std::string& name, const std::string& text, const std::string& where) {
  const ConfigField& field = find_field(name, where);
  if (!field.parse(config, text)) {
    throw InputError(where + "key '" + name + "' expects " + written_as(field.type) + ", got '" + text + "'");
  }
  config.set_keys.insert(name);
}

// A mapping's key as text: YAML allows a mapping or a list as a key (`? {a: 1}`), which names nothing here.
std::string key_text(const YAML::Node& key, const std::string& where, const std::string& inside) {
  if (key.IsScalar()) return key.Scalar();
  throw InputError(where + "a key " + inside + " at line " + std::to_string(key.Mark().line + 1) + " is a YAML " +
                   (key.IsMap()        ? "mapping"
                    : key.IsSequence() ? "list"
                                       : "null") +
                   "; keys are plain names (train: {steps: 10})");
}

// The entries of MAP under the dotted PREFIX; a nested mapping (model.moe) adds a level. MAPS: the
// mappings met so far, so that one written twice is refused as a key written twice is.
void set_entries(Config& config, const std::string& prefix, const YAML::Node& map, const std::string& where,
                 std::set<std::string>& maps) {
  for (const auto& entry : map) {
    const std::string name = prefix + "." + key_text(entry.first, where, "in '" + prefix + "'");
    // yaml-cpp keeps both of two equal keys; a user who wrote both meant one of them.
    if (config.set_keys.count(name) != 0) throw InputError(where + "key '" + name + "' appears twice");
    if (entry.second.IsMap()) {
      if (!maps.insert(name).second) throw InputError(where + "'" + name + "' appears twice; write its keys once");
      set_entries(config, name, entry.second, where, maps);
      continue;
    }
    if (entry.second.IsSequence() && find_field(name, where).type == "list of ints") {  // [1, 3]: "1,3"
      std::string joined;
      for (const auto& item : entry.second) {
        if (!item.IsScalar()) throw InputError(where + "key '" + name + "' must be a list of single values");
        joined += (joined.empty() ? "" : ",") + item.Scalar();
      }
      set_field(config, name, joined, where);
      continue;
    }
    if (!entry.second.IsScalar() && !entry.second.IsNull()) {
      throw InputError(where + "key '" + name + "' must be a single value");
    }
    set_field(config, name, entry.second.IsNull() ? "" : entry.second.Scalar(), where);
  }
}

}  // namespace

void apply_override(Config& config, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError("--set expects section.key=value, got '" + assignment + "'");
  }
  set_field(config, assignment.substr(0, eq), assignment.substr(eq + 1), "--set " + assignment + ": ");
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config config;
  config.source = path;
  std::ifstream probe(path);
  if (!probe) throw InputError("cannot read config file '" + path + "'");
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) throw InputError("config file '" + path + "' is a directory");

  YAML::Node root;
  try {
    std::vector<YAML::Node> documents;
    for (const auto& document : YAML::LoadAllFromFile(path)) {
      if (document.IsDefined() && !document.IsNull()) documents.push_back(document);  // a trailing --- is no document
    }
    // A second document would be dropped without a word: one config, one document.
    if (documents.size() > 1) {
      throw InputError("config file '" + path + "' holds " + std::to_string(documents.size()) +
                       " YAML documents (separated by ---); loom reads one: merge them, or split them into files");
    }
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::Exception& e) {
    throw InputError("config file '" + path + "' is not valid YAML: " + e.what());
  }
  // An empty file (or comments only, or /dev/null) would train on built-in defaults: surely not what was meant.
  if (!root.IsDefined() || root.IsNull()) {
    throw InputError("config file '" + path +
                     "' is empty (or holds only comments): it sets nothing; give its sections (model, train, ...), "
                     "e.g. copy configs/gpt_tiny.yaml");
  }
  if (!root.IsMap())
    throw InputError("config file '" + path + "' must be a mapping of sections (model, parallel, train, ...)");

  const std::string where = path + ": ";
  std::set<std::string> maps;
  for (const auto& section : root) {
    const std::string section_name = key_text(section.first, where, "at the top");
    auto sections = section_names();
    if (std::find(sections.begin(), sections.end(), section_name) == sections.end()) {
      const auto dot = section_name.find('.');
      if (dot != std::string::npos &&
          std::find(sections.begin(), sections.end(), section_name.substr(0, dot)) != sections.end()) {
        throw InputError(where + "'" + section_name + "' is written as one name at the top; a file nests it (" +
                         section_name.substr(0, dot) + ": {" + section_name.substr(dot + 1) +
                         ": ...}), --set takes the dotted name");
      }
      throw InputError(where + unknown("section", section_name, sections));
    }
    if (!maps.insert(section_name).second) {
      throw InputError(where + "section '" + section_name + "' appears twice; write its keys under one");
    }
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap()) throw InputError(where + "section '" + section_name + "' must be a mapping");
    set_entries(config, section_name, section.second, where, maps);
  }
  for (const auto& o : overrides) apply_override(config, o);
  resolve_model_defaults(config);
  std::set<std::string> overridden;
  for (const auto& o : overrides) overridden.insert(o.substr(0, o.find('=')));
  apply_hf_config(config, overridden);  // after the defaults: config.json decides what the config left unset
  return config;
}

void resolve_model_defaults(Config& config) {
  auto& m = config.model;
  const bool llama = m.arch == ModelArch::llama;
  auto unset = [&](const char* key) { return config.set_keys.count(std::string("model.") + key) == 0; };
  if (unset("norm")) m.norm = llama ? NormKind::rmsnorm : NormKind::layernorm;
  if (unset("activation")) m.activation = llama ? Activation::swiglu : Activation::gelu;
  if (unset("position")) m.position = llama ? PositionKind::rope : PositionKind::learned;
  if (unset("bias")) m.bias = !llama;
  if (unset("qkv_bias")) m.qkv_bias = m.bias;
  if (unset("tie_embeddings")) m.tie_embeddings = !llama;
}

std::string to_yaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string section, subsection;  // a key "moe.top_k" sits in the mapping "moe" of its section
  for (const auto& f : config_fields()) {
    const auto dot = f.key.find('.');
    const std::string sub = dot == std::string::npos ? "" : f.key.substr(0, dot);
    if (f.section != section || sub != subsection) {
      if (!subsection.empty()) out << YAML::EndMap;
      if (f.section != section) {
        if (!section.empty()) out << YAML::EndMap;
        section = f.section;
        out << YAML::Key << section << YAML::Value << YAML::BeginMap;
      }
      subsection = sub;
      if (!sub.empty()) out << YAML::Key << sub << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << (sub.empty() ? f.key : f.key.substr(dot + 1)) << YAML::Value;
    if (f.type == "string") {
      out << YAML::DoubleQuoted << f.print(config);
    } else {
      out << f.print(config);
    }
  }
  if (!subsection.empty()) out << YAML::EndMap;
  if (!section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace loom
