#include "parallel/slurm_launch.h"

#include <cstdlib>
#include <numeric>

#include "core/errors.h"
#include "parallel/slurm_hostlist.h"

namespace loom::parallel {
namespace {

bool is_set(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  return value && *value;
}

long long parse_count(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 0 || value > 1'000'000'000) {
    throw InputError(what + "='" + text + "' is not a non-negative integer");
  }
  return value;
}

long long read_count(const EnvLookup& env, const char* name) {
  if (!is_set(env, name)) throw InputError(std::string("srun started this process but did not set ") + name);
  return parse_count(env(name), name);
}

// This node's task count, and the variable it came from (for messages).
std::pair<int, std::string> tasks_on_this_node(const EnvLookup& env, int world, int node) {
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (!is_set(env, name)) continue;
    const std::vector<int> counts = expand_tasks_per_node(env(name), name);
    const int total = std::accumulate(counts.begin(), counts.end(), 0);
    if (total != world) {
      throw InputError(std::string(name) + "='" + env(name) + "' adds up to " + std::to_string(total) +
                       " tasks, but SLURM_NTASKS is " + std::to_string(world));
    }
    if (node >= static_cast<int>(counts.size())) {
      throw InputError("SLURM_NODEID=" + std::to_string(node) + " is not below the " + std::to_string(counts.size()) +
                       " nodes of " + name + "='" + env(name) + "'");
    }
    return {counts[static_cast<size_t>(node)], name};
  }
  if (is_set(env, "SLURM_NTASKS_PER_NODE")) {
    return {static_cast<int>(read_count(env, "SLURM_NTASKS_PER_NODE")), "SLURM_NTASKS_PER_NODE"};
  }
  throw InputError(
      "srun started this process but set none of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE and "
      "SLURM_NTASKS_PER_NODE");
}

std::string first_host(const EnvLookup& env) {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (is_set(env, name)) return expand_hostlist(env(name), name).front();
  }
  throw InputError(
      "srun started this process but set neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST; set MASTER_ADDR "
      "to the host of task 0");
}

int store_port(const EnvLookup& env) {
  if (is_set(env, "MASTER_PORT")) {
    const long long port = read_count(env, "MASTER_PORT");
    if (port < 1 || port > 65535) throw InputError("MASTER_PORT=" + std::to_string(port) + " is not a TCP port");
    return static_cast<int>(port);
  }
  if (!is_set(env, "SLURM_JOB_ID")) {
    throw InputError("srun started this process but set no SLURM_JOB_ID to derive the port from; set MASTER_PORT");
  }
  return slurm_default_port(read_count(env, "SLURM_JOB_ID"));
}

}  // namespace

bool started_by_srun(const EnvLookup& env) {
  return is_set(env, "SLURM_PROCID") && is_set(env, "SLURM_STEP_ID");
}

// Below Linux's ephemeral ports (32768 on by default), where the node's own outgoing connections
// could hold the port (EADDRINUSE, seen once with 10000 + id % 50000).
int slurm_default_port(long long job_id) {
  return static_cast<int>(10000 + job_id % 20000);
}

std::vector<int> expand_tasks_per_node(const std::string& text, const std::string& source) {
  const auto fail = [&] { return InputError(source + "='" + text + "' is not a list such as '4(x2),3'"); };
  std::vector<int> counts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t open = item.find("(x");
    std::string tasks = item, repeats = "1";
    if (open != std::string::npos) {
      if (item.back() != ')') throw fail();
      tasks = item.substr(0, open);
      repeats = item.substr(open + 2, item.size() - open - 3);
    }
    long long n = 0, times = 0;
    try {
      n = parse_count(tasks, source);
      times = parse_count(repeats, source);
    } catch (const InputError&) {
      throw fail();
    }
    if (n < 1 || times < 1 || counts.size() + static_cast<size_t>(times) > 1'000'000) throw fail();
    counts.insert(counts.end(), static_cast<size_t>(times), static_cast<int>(n));
    start = end + 1;
  }
  return counts;
}

LaunchInfo slurm_launch(const EnvLookup& env) {
  LaunchInfo info;
  info.launcher = "slurm";
  info.rank = static_cast<int>(read_count(env, "SLURM_PROCID"));
  info.world = static_cast<int>(read_count(env, "SLURM_NTASKS"));
  if (is_set(env, "SLURM_STEP_NUM_TASKS") && read_count(env, "SLURM_STEP_NUM_TASKS") != info.world) {
    throw InputError(std::string("SLURM_STEP_NUM_TASKS=") + env("SLURM_STEP_NUM_TASKS") +
                     " disagrees with SLURM_NTASKS=" + env("SLURM_NTASKS"));
  }
  if (info.rank >= info.world) {
    throw InputError("SLURM_PROCID=" + std::to_string(info.rank) +
                     " is not below SLURM_NTASKS=" + std::to_string(info.world));
  }
  info.local_rank = static_cast<int>(read_count(env, "SLURM_LOCALID"));
  const int node = is_set(env, "SLURM_NODEID") ? static_cast<int>(read_count(env, "SLURM_NODEID")) : 0;
  const auto [local_world, source] = tasks_on_this_node(env, info.world, node);
  info.local_world = local_world;
  if (info.local_rank >= info.local_world) {
    throw InputError("SLURM_LOCALID=" + std::to_string(info.local_rank) + " is not below this node's " +
                     std::to_string(info.local_world) + " tasks (" + source + ")");
  }
  if (info.world > 1) {
    info.master_addr = is_set(env, "MASTER_ADDR") ? std::string(env("MASTER_ADDR")) : first_host(env);
    info.master_port = store_port(env);
  }
  return info;
}

}  // namespace loom::parallel
