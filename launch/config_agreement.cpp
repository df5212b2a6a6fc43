#include "launch/config_agreement.h"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/data_blend.h"
#include "core/errors.h"
#include "core/loss_mask.h"
#include "core/per_node_keys.h"
#include "launch/data_record.h"

namespace loom::launch {
namespace {

// section.key -> value, from to_yaml's text (nested maps joined with dots).
void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& entry : node) {
      const std::string key = entry.first.as<std::string>();
      flatten(entry.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else {
    YAML::Emitter emitter;
    emitter << YAML::Flow << node;
    out[prefix] = emitter.c_str();
  }
}

// The resolved config's keys, less those a node may set for itself (its cores, its GPU's peak, its
// device): what every rank must train alike.
std::map<std::string, std::string> keys_of(const std::string& yaml) {
  std::map<std::string, std::string> out;
  flatten(YAML::Load(yaml), "", out);
  for (const auto& per_node : per_node_keys()) out.erase(per_node);
  return out;
}

// text_of's inverse.
std::map<std::string, std::string> keys_of_text(const std::string& text) {
  std::map<std::string, std::string> out;
  std::string line;
  for (std::istringstream in(text); std::getline(in, line);) {
    const auto colon = line.find(": ");
    if (colon != std::string::npos) out[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return out;
}

std::string text_of(const std::map<std::string, std::string>& keys) {
  std::string text;
  for (const auto& [key, value] : keys) text += key + ": " + value + "\n";
  return text;
}

// What every rank must have alike: the config's keys, and whether the rank was told to resume (a
// rank that resumes waits in the checkpoint's broadcast for ranks that never join it).
std::map<std::string, std::string> agreed_keys(const Config& config, bool resuming, int world) {
  auto keys = keys_of(to_yaml(config));
  keys["--resume"] = resuming ? "given" : "not given";
  keys["WORLD_SIZE"] = std::to_string(world);  // (a rank told another waits for ranks that never come)
  // The same data.path may name different files on different ranks (a relative path from another
  // working directory, a node's own copy): each dataset's sizes and a checksum of its index's ends.
  for (const auto& [spec, key] :
       {std::pair{config.data.path, "data.path"}, {config.data.valid_path, "data.valid_path"}}) {
    std::vector<BlendComponent> blend;
    try {
      blend = parse_blend(spec, key);
    } catch (const InputError&) {
      continue;  // refused later, on every rank alike, naming the key
    }
    for (const auto& component : blend)
      keys[std::string(key) + " files " + component.prefix] = dataset_fingerprint(component.prefix);
  }
  // ... and the end-of-document id data.eod_mask_loss reads from the sidecars, which a node's own copy may not share.
  try {
    if (config.data.eod_mask_loss) keys["data.eod_mask_loss's id"] = std::to_string(resolve_eod_id(config));
  } catch (const InputError&) {
    // refused later, on every rank alike
  }
  return keys;
}

std::vector<uint8_t> bytes_of(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

// After rank FIRST's config did not come: it and every later rank whose config is not in the store
// either (earlier ones were read). Asked over a new connection, since the one whose wait timed out
// may be out of step; FIRST alone when even that fails.
std::vector<int> ranks_not_joined(const parallel::LaunchEnv& env, int first) {
  std::vector<int> missing{first};
  try {
    const auto fresh = env.store_reconnector()();
    for (int r = first + 1; r < env.world(); ++r)
      if (r != env.rank() && !fresh->check({"config/" + std::to_string(r)})) missing.push_back(r);
  } catch (const std::exception&) {
    return {first};
  }
  return missing;
}

}  // namespace

void agree_on_config(const Config& config, bool resuming, const parallel::LaunchEnv& env) {
  if (env.world() == 1 || !env.store()) return;
  const auto& store = env.store();
  const auto here = agreed_keys(config, resuming, env.world());
  const std::string mine = text_of(here);
  // Two processes given one RANK: the second to come says so (the other then waits for the rank
  // nobody was given, and says that).
  if (store->add("rank_taken/" + std::to_string(env.rank()), 1) > 1) {
    throw InputError("two processes were started as rank " + std::to_string(env.rank()) +
                     ": give each process of the job its own rank in 0.." + std::to_string(env.world() - 1) +
                     " (RANK)");
  }
  store->set("config/" + std::to_string(env.rank()), bytes_of(mine));
  // A rank that never publishes its config never joined: the store's own timeout says only its key.
  auto config_of = [&](int r) {
    try {
      return store->get("config/" + std::to_string(r));
    } catch (const std::exception&) {  // (its message is the key and a backtrace)
      const auto missing = ranks_not_joined(env, r);
      std::string names;
      for (size_t i = 0; i < missing.size(); ++i)
        names += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + std::to_string(missing[i]);
      throw CommError((missing.size() > 1 ? "ranks " : "rank ") + names + " of " + std::to_string(env.world()) +
                      " did not join the job within parallel.timeout_s (not started, stopped, or started with "
                      "another MASTER_ADDR, MASTER_PORT or WORLD_SIZE)");
    }
  };
  const auto rank0_bytes = config_of(0);
  const std::string rank0(rank0_bytes.begin(), rank0_bytes.end());
  // Every rank reads every rank's, so that all reach the same verdict and leave together.
  std::vector<int> differing;
  std::string first_different;  // the first differing rank's, which every rank names the keys of
  for (int r = 1; r < env.world(); ++r) {
    const auto theirs = config_of(r);
    if (std::string(theirs.begin(), theirs.end()) == rank0) continue;
    if (differing.empty()) first_different.assign(theirs.begin(), theirs.end());
    differing.push_back(r);
  }
  store->set("config_read/" + std::to_string(env.rank()), bytes_of("1"));
  if (differing.empty()) return;
  if (env.rank() == 0) {
    // Rank 0's process serves the store (unless torchrun's agent does): leaving at once would
    // cut off a rank still reading the configs, which would then fail on a closed connection
    // (exit 1, no key named) instead of reaching this verdict. Wait until every rank has read.
    std::vector<std::string> read;
    for (int r = 1; r < env.world(); ++r) read.push_back("config_read/" + std::to_string(r));
    try {
      store->wait(read, std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000)));
    } catch (const std::exception&) {
      // A rank that never reads (dead, or stuck elsewhere) does not keep this one from its verdict.
    }
  }
  std::string ranks;
  for (int r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  std::string message = "the ranks were started with different configs: " +
                        (differing.size() > 1 ? "ranks " + ranks + " differ" : "rank " + ranks + " differs") +
                        " from rank 0";
  // The keys: this rank's values against rank 0's, or (rank 0, and ranks that agree with it) the
  // first differing rank's.
  const bool mine_differs = mine != rank0;
  const auto there = keys_of_text(rank0);
  const auto compared = mine_differs ? here : keys_of_text(first_different);
  const std::string who = mine_differs ? "here" : "on rank " + std::to_string(differing.front());
  std::string keys;
  auto all = compared;
  for (const auto& entry : there) all.emplace(entry.first, "(none)");  // keys rank 0 alone has
  for (const auto& [key, value] : all) {
    const auto it = there.find(key);
    const std::string other = it == there.end() ? "(none)" : it->second;
    if (other != value)
      keys += (keys.empty() ? "" : ", ") + key + " = " + value + " " + who + ", " + other + " on rank 0";
  }
  message += " (" + keys + ")";
  throw InputError(message + "; start every rank with the same config file, --set flags, --resume and data files");
}

}  // namespace loom::launch
