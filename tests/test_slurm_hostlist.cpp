#include <catch2/catch.hpp>

#include "core/errors.h"
#include "parallel/slurm_hostlist.h"

using loom::InputError;
using loom::parallel::expand_hostlist;
using Hosts = std::vector<std::string>;

TEST_CASE("a host list expands ranges and keeps their zero padding", "[slurm]") {
  CHECK(expand_hostlist("node[01-04,07]", "V") == Hosts{"node01", "node02", "node03", "node04", "node07"});
  CHECK(expand_hostlist("gpu-[001-003]", "V") == Hosts{"gpu-001", "gpu-002", "gpu-003"});
  CHECK(expand_hostlist("n[8-11]", "V") == Hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[08-10]", "V") == Hosts{"n08", "n09", "n10"});
  CHECK(expand_hostlist("vm", "V") == Hosts{"vm"});
}

TEST_CASE("a host list splits at commas outside brackets only", "[slurm]") {
  CHECK(expand_hostlist("a[1-2],b3", "V") == Hosts{"a1", "a2", "b3"});
  CHECK(expand_hostlist("b3,a[1-2]", "V") == Hosts{"b3", "a1", "a2"});
  CHECK(expand_hostlist("x,y.example.org,z[5]", "V") == Hosts{"x", "y.example.org", "z5"});
}

TEST_CASE("several brackets in one name multiply out, the first slowest", "[slurm]") {
  CHECK(expand_hostlist("rack[1-2]-n[1-2]", "V") == Hosts{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand_hostlist("[1-2]x", "V") == Hosts{"1x", "2x"});
}

TEST_CASE("a malformed host list is refused naming its variable", "[slurm]") {
  for (const char* bad : {"node[1-2", "node1-2]", "node[[1]]", "node[2-1]", "node[a-b]", "node[]", "a,,b", "",
                          "node[1-]", "node[1,]", "n[0-99999999]"}) {
    INFO(bad);
    CHECK_THROWS_AS(expand_hostlist(bad, "SLURM_JOB_NODELIST"), InputError);
    CHECK_THROWS_WITH(expand_hostlist(bad, "SLURM_JOB_NODELIST"),
                      Catch::Contains("SLURM_JOB_NODELIST='" + std::string(bad) + "'"));
  }
}
