#include "parallel/cluster_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/errors.h"

namespace loom::parallel {

ClusterSpec load_cluster(const std::string& path) {
  // yaml-cpp opens a directory and then fails reading it with a stream error, not its BadFile.
  if (std::filesystem::is_directory(path)) throw InputError("cannot read cluster file '" + path + "': a directory");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError("cannot read cluster file '" + path + "'");
  } catch (const YAML::Exception& e) {
    throw InputError("cluster file '" + path + "' is not valid YAML: " + e.what());
  } catch (const std::exception& e) {
    throw InputError("cannot read cluster file '" + path + "': " + e.what());
  }
  const std::set<std::string> keys = {"name",
                                      "gpus_per_node",
                                      "nodes",
                                      "peak_bf16_tflops",
                                      "memory_gb",
                                      "intra_node_bandwidth_GBps",
                                      "intra_node_latency_us",
                                      "inter_node_bandwidth_GBps",
                                      "inter_node_latency_us",
                                      "compute_efficiency",
                                      "inter_node_nic",
                                      "backend"};
  if (!root.IsMap()) throw InputError("cluster file '" + path + "' must be a mapping of keys");
  std::set<std::string> seen;
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) throw InputError("cluster file '" + path + "': a key that is not a name");
    const auto key = entry.first.as<std::string>();
    if (!keys.count(key)) throw InputError("cluster file '" + path + "': unknown key '" + key + "'");
    // yaml-cpp keeps the first of two; which one the writer meant is not ours to guess.
    if (!seen.insert(key).second) throw InputError("cluster file '" + path + "': key '" + key + "' is given twice");
  }
  auto bad = [&](const std::string& key, const std::string& what) {
    return InputError("cluster file '" + path + "': key '" + key + "' " + what);
  };
  // A number within [LOW, HIGH]: the bounds keep the cost model's sums finite and meaningful (a
  // negative latency or a bandwidth of 1e-300 gave negative or 300-digit step times).
  auto number = [&](const std::string& key, double low, double high, const std::string& range) {
    if (!root[key]) throw InputError("cluster file '" + path + "': missing key '" + key + "'");
    double value = 0;
    try {
      if (!root[key].IsScalar()) throw bad(key, "must be a number");
      value = root[key].as<double>();
    } catch (const YAML::Exception&) {
      throw bad(key, "must be a number");
    }
    if (!(value >= low && value <= high)) throw bad(key, "must be " + range + ", not " + root[key].as<std::string>());
    return value;
  };
  auto count = [&](const std::string& key) {
    const double value = number(key, 1, 1e6, "a whole number from 1 to 1000000");
    if (value != std::floor(value)) throw bad(key, "must be a whole number, not " + root[key].as<std::string>());
    return static_cast<int64_t>(value);
  };
  auto text = [&](const std::string& key) {
    if (!root[key].IsScalar()) throw bad(key, "must be a word, not a list or a mapping");
    return root[key].as<std::string>();
  };
  ClusterSpec c;
  c.name = root["name"] ? text("name") : path;
  c.gpus_per_node = count("gpus_per_node");
  c.nodes = count("nodes");
  c.peak_flops = number("peak_bf16_tflops", 1e-3, 1e6, "from 0.001 to 1000000 (TFLOP/s)") * 1e12;
  c.memory_bytes = number("memory_gb", 1e-3, 1e6, "from 0.001 to 1000000 (GB)") * 1e9;
  const std::string bandwidth = "from 0.001 to 1000000 (GB/s)", latency = "from 0 to 1000000 (microseconds)";
  c.intra_bandwidth = number("intra_node_bandwidth_GBps", 1e-3, 1e6, bandwidth) * 1e9;
  c.intra_latency = number("intra_node_latency_us", 0, 1e6, latency) * 1e-6;
  c.inter_bandwidth = number("inter_node_bandwidth_GBps", 1e-3, 1e6, bandwidth) * 1e9;
  c.inter_latency = number("inter_node_latency_us", 0, 1e6, latency) * 1e-6;
  c.compute_efficiency = root["compute_efficiency"] ? number("compute_efficiency", 1e-3, 1.0,
                                                             "the share of peak compute reached, from 0.001 to 1")
                                                    : 0.5;
  if (root["inter_node_nic"]) {
    const auto nic = text("inter_node_nic");
    if (nic != "per_gpu" && nic != "shared") {
      throw InputError("cluster file '" + path + "': key 'inter_node_nic' must be per_gpu or shared, not '" + nic +
                       "'");
    }
    c.inter_nic_shared = nic == "shared";
  }
  if (root["backend"]) {
    c.backend = text("backend");
    if (c.backend != "nccl" && c.backend != "gloo") {
      throw InputError("cluster file '" + path + "': key 'backend' must be nccl or gloo, not '" + c.backend + "'");
    }
  }
  return c;
}

}  // namespace loom::parallel
