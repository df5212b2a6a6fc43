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
    const auto key = entry.first.as<std::string>();
    if (!keys.count(key)) throw InputError("cluster file '" + path + "': unknown key '" + key + "'");
    // yaml-cpp keeps the first of two; which one the writer meant is not ours to guess.
    if (!seen.insert(key).second) throw InputError("cluster file '" + path + "': key '" + key + "' is given twice");
  }
  auto number = [&](const std::string& key, double min) {
    if (!root[key]) throw InputError("cluster file '" + path + "': missing key '" + key + "'");
    double value = 0;
    try {
      value = root[key].as<double>();
    } catch (const YAML::Exception&) {
      throw InputError("cluster file '" + path + "': key '" + key + "' must be a number");
    }
    if (!(value > min) || !std::isfinite(value)) {
      throw InputError("cluster file '" + path + "': key '" + key + "' must be a finite number above " +
                       std::to_string(min));
    }
    return value;
  };
  ClusterSpec c;
  c.name = root["name"] ? root["name"].as<std::string>() : path;
  c.gpus_per_node = static_cast<int64_t>(number("gpus_per_node", 0));
  c.nodes = static_cast<int64_t>(number("nodes", 0));
  c.peak_flops = number("peak_bf16_tflops", 0) * 1e12;
  c.memory_bytes = number("memory_gb", 0) * 1e9;
  c.intra_bandwidth = number("intra_node_bandwidth_GBps", 0) * 1e9;
  c.intra_latency = number("intra_node_latency_us", -1) * 1e-6;
  c.inter_bandwidth = number("inter_node_bandwidth_GBps", 0) * 1e9;
  c.inter_latency = number("inter_node_latency_us", -1) * 1e-6;
  c.compute_efficiency = root["compute_efficiency"] ? number("compute_efficiency", 0) : 0.5;
  if (c.compute_efficiency > 1.0) {
    throw InputError("cluster file '" + path + "': key 'compute_efficiency' is the share of peak compute reached, " +
                     "at most 1 (got " + std::to_string(c.compute_efficiency) + ")");
  }
  if (root["inter_node_nic"]) {
    const auto nic = root["inter_node_nic"].as<std::string>();
    if (nic != "per_gpu" && nic != "shared") {
      throw InputError("cluster file '" + path + "': key 'inter_node_nic' must be per_gpu or shared, not '" + nic +
                       "'");
    }
    c.inter_nic_shared = nic == "shared";
  }
  if (root["backend"]) {
    c.backend = root["backend"].as<std::string>();
    if (c.backend != "nccl" && c.backend != "gloo") {
      throw InputError("cluster file '" + path + "': key 'backend' must be nccl or gloo, not '" + c.backend + "'");
    }
  }
  return c;
}

}  // namespace loom::parallel
