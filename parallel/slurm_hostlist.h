// SLURM's compressed host lists, as in SLURM_JOB_NODELIST: "node[01-04,07]",
// "a[1-2],b3", "gpu-[001-003]", "rack[1-2]-n[1-2]". A bracket holds numbers and
// ranges; a range keeps the zero padding of its first number ("[08-10]" gives
// 08, 09, 10). Several brackets in one name multiply out, the first slowest.
#pragma once

#include <string>
#include <vector>

namespace loom::parallel {

// Every host of LIST, in order. Throws InputError naming SOURCE (the variable
// LIST came from) when LIST is not a host list.
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& source);

}  // namespace loom::parallel
