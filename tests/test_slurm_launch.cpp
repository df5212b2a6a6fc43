#include <catch2/catch.hpp>
#include <map>

#include "core/errors.h"
#include "parallel/slurm_launch.h"

using loom::InputError;
using loom::parallel::expand_tasks_per_node;
using loom::parallel::slurm_launch;
using loom::parallel::started_by_srun;
using Variables = std::map<std::string, std::string>;

namespace {

// What srun -N 3 -n 11 sets for task 9 (the second on the third node), as copied from a real step.
Variables task_9_of_11() {
  return {{"SLURM_PROCID", "9"},
          {"SLURM_NTASKS", "11"},
          {"SLURM_STEP_NUM_TASKS", "11"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "2"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_ID", "123456"},
          {"SLURM_STEP_TASKS_PER_NODE", "4(x2),3"},
          {"SLURM_TASKS_PER_NODE", "4(x2),3"},
          {"SLURM_STEP_NODELIST", "node[07-09]"},
          {"SLURM_JOB_NODELIST", "node[01,07-09]"}};
}

loom::parallel::EnvLookup lookup(const Variables& variables) {
  return [&variables](const char* name) -> const char* {
    auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  };
}

void check_refused(const Variables& variables, const std::string& names) {
  INFO(names);
  CHECK_THROWS_AS(slurm_launch(lookup(variables)), InputError);
  CHECK_THROWS_WITH(slurm_launch(lookup(variables)), Catch::Contains(names));
}

}  // namespace

TEST_CASE("an srun task reads its rank, world and node from SLURM's variables", "[slurm]") {
  const auto variables = task_9_of_11();
  REQUIRE(started_by_srun(lookup(variables)));
  const auto info = slurm_launch(lookup(variables));
  CHECK(info.launcher == "slurm");
  CHECK(info.rank == 9);
  CHECK(info.world == 11);
  CHECK(info.local_rank == 1);
  CHECK(info.local_world == 3);
  CHECK(info.master_addr == "node07");  // the step's first node, not the allocation's
  CHECK(info.master_port == 10000 + 123456 % 20000);
  CHECK_FALSE(info.agent_store);
}

TEST_CASE("a batch script has SLURM_PROCID but no step: it is not an srun task", "[slurm]") {
  auto variables = task_9_of_11();
  variables.erase("SLURM_STEP_ID");
  CHECK_FALSE(started_by_srun(lookup(variables)));
}

TEST_CASE("MASTER_ADDR and MASTER_PORT win over the node list and the job id", "[slurm]") {
  auto variables = task_9_of_11();
  variables["MASTER_ADDR"] = "10.0.0.5";
  variables["MASTER_PORT"] = "29500";
  const auto info = slurm_launch(lookup(variables));
  CHECK(info.master_addr == "10.0.0.5");
  CHECK(info.master_port == 29500);
}

TEST_CASE("without the step's lists, the job's are used", "[slurm]") {
  auto variables = task_9_of_11();
  variables.erase("SLURM_STEP_TASKS_PER_NODE");
  variables.erase("SLURM_STEP_NODELIST");
  variables["SLURM_JOB_NODELIST"] = "a[1-2],b3";
  const auto info = slurm_launch(lookup(variables));
  CHECK(info.local_world == 3);
  CHECK(info.master_addr == "a1");
  variables.erase("SLURM_TASKS_PER_NODE");
  variables["SLURM_NTASKS_PER_NODE"] = "4";
  variables["SLURM_LOCALID"] = "3";
  CHECK(slurm_launch(lookup(variables)).local_world == 4);
}

TEST_CASE("one task needs no store", "[slurm]") {
  const Variables variables{{"SLURM_PROCID", "0"},  {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"},
                            {"SLURM_STEP_ID", "3"}, {"SLURM_NODEID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "1"}};
  const auto info = slurm_launch(lookup(variables));
  CHECK(info.world == 1);
  CHECK(info.master_addr.empty());
  CHECK(info.master_port == 0);
}

TEST_CASE("inconsistent SLURM variables are refused naming the variable", "[slurm]") {
  auto v = task_9_of_11();
  v["SLURM_PROCID"] = "11";
  check_refused(v, "SLURM_PROCID=11 is not below SLURM_NTASKS=11");
  v = task_9_of_11();
  v["SLURM_STEP_NUM_TASKS"] = "12";
  check_refused(v, "SLURM_STEP_NUM_TASKS=12 disagrees with SLURM_NTASKS=11");
  v = task_9_of_11();
  v["SLURM_STEP_TASKS_PER_NODE"] = "4(x3)";
  check_refused(v, "SLURM_STEP_TASKS_PER_NODE='4(x3)' adds up to 12 tasks, but SLURM_NTASKS is 11");
  v = task_9_of_11();
  v["SLURM_NODEID"] = "3";
  check_refused(v, "SLURM_NODEID=3 is not below the 3 nodes of SLURM_STEP_TASKS_PER_NODE");
  v = task_9_of_11();
  v["SLURM_LOCALID"] = "3";
  check_refused(v, "SLURM_LOCALID=3 is not below this node's 3 tasks (SLURM_STEP_TASKS_PER_NODE)");
  v = task_9_of_11();
  v["SLURM_NTASKS"] = "eleven";
  check_refused(v, "SLURM_NTASKS='eleven' is not a non-negative integer");
  v = task_9_of_11();
  v.erase("SLURM_NTASKS");
  check_refused(v, "did not set SLURM_NTASKS");
  v = task_9_of_11();
  v["MASTER_PORT"] = "70000";
  check_refused(v, "MASTER_PORT=70000 is not a TCP port");
  v = task_9_of_11();
  v.erase("SLURM_JOB_ID");
  check_refused(v, "SLURM_JOB_ID");
  v = task_9_of_11();
  v.erase("SLURM_STEP_NODELIST");
  v.erase("SLURM_JOB_NODELIST");
  check_refused(v, "MASTER_ADDR");
  v = task_9_of_11();
  v["SLURM_STEP_NODELIST"] = "node[07-09";
  check_refused(v, "SLURM_STEP_NODELIST='node[07-09' is not a host list");
  v = task_9_of_11();
  v.erase("SLURM_STEP_TASKS_PER_NODE");
  v.erase("SLURM_TASKS_PER_NODE");
  check_refused(v, "SLURM_NTASKS_PER_NODE");
}

TEST_CASE("tasks per node: counts with repeats", "[slurm]") {
  CHECK(expand_tasks_per_node("4(x2),3", "V") == std::vector<int>{4, 4, 3});
  CHECK(expand_tasks_per_node("2", "V") == std::vector<int>{2});
  CHECK(expand_tasks_per_node("1,2(x3)", "V") == std::vector<int>{1, 2, 2, 2});
  for (const char* bad : {"", "4(x2", "4(x)", "(x2)", "4,,3", "0", "4(x0)", "a", "4x2"}) {
    INFO(bad);
    CHECK_THROWS_AS(expand_tasks_per_node(bad, "SLURM_TASKS_PER_NODE"), InputError);
    CHECK_THROWS_WITH(expand_tasks_per_node(bad, "SLURM_TASKS_PER_NODE"),
                      Catch::Contains("SLURM_TASKS_PER_NODE='" + std::string(bad) + "'"));
  }
}
