// The ranks of a job step that srun started, from SLURM's variables alone:
//
//   rank         SLURM_PROCID
//   world        SLURM_NTASKS (SLURM_STEP_NUM_TASKS must agree when set)
//   local rank   SLURM_LOCALID
//   local world  this node's entry (SLURM_NODEID) of SLURM_STEP_TASKS_PER_NODE, else of
//                SLURM_TASKS_PER_NODE ("4(x2),3": four tasks on each of two nodes, three on
//                the third), else SLURM_NTASKS_PER_NODE
//   store        MASTER_ADDR, else the first host of SLURM_STEP_NODELIST (else
//                SLURM_JOB_NODELIST), where task 0 runs; MASTER_PORT, else
//                slurm_default_port(SLURM_JOB_ID). Rank 0 serves it.
//
// The step's own lists come first: a step may use fewer nodes and tasks than its allocation.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/launch_env.h"

namespace loom::parallel {

// Reads one environment variable; null when unset. Tests pass a map instead of the environment.
using EnvLookup = std::function<const char*(const char*)>;

// True inside an srun step (SLURM_PROCID and SLURM_STEP_ID). A batch script itself has
// SLURM_PROCID but no step, so loom run straight from it is one process, not task 0 of many.
bool started_by_srun(const EnvLookup& env);

// Throws InputError naming the variable when the step's variables disagree.
LaunchInfo slurm_launch(const EnvLookup& env);

// The store's port when MASTER_PORT is unset: 10000 + job_id % 50000, the same on every node
// of the job and within 10000-59999. Two steps of one job running at once need their own MASTER_PORT.
int slurm_default_port(long long job_id);

// "4(x2),3" -> {4, 4, 3}; throws InputError naming SOURCE when TEXT is not such a list.
std::vector<int> expand_tasks_per_node(const std::string& text, const std::string& source);

}  // namespace loom::parallel
