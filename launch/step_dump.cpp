#include "launch/step_dump.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"

namespace loom::launch {

std::string rank_tensor_file(const std::string& kind, int64_t rank) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s_rank_%05lld.safetensors", kind.c_str(), static_cast<long long>(rank));
  return name;
}

std::string rank_description_file(int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05lld.json", static_cast<long long>(rank));
  return name;
}

void write_rank_tensors(const std::string& dir, const std::string& kind,
                        const std::vector<parallel::ParallelParameter>& params,
                        const std::vector<torch::Tensor>& tensors, const parallel::ProcessGroups& groups) {
  torch::NoGradGuard no_grad;
  std::filesystem::create_directories(dir);
  const auto& sizes = groups.grid().sizes();
  std::vector<std::pair<std::string, torch::Tensor>> named;
  nlohmann::json described = nlohmann::json::array();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (p.tied_copy) continue;  // the owner's is the one that counts
    named.emplace_back(p.name, tensors[i].detach().to(torch::kCPU, torch::kFloat32).contiguous());
    described.push_back({{"name", p.name},
                         {"tp_split_dim", p.tp_split_dim},
                         {"global_shape", p.global_shape_for(sizes.tp)},
                         {"expert", p.expert},
                         {"summed_over_tp", p.sequence_parallel}});
  }
  write_safetensors(dir + "/" + rank_tensor_file(kind, groups.rank()), named);
  if (kind != "gradients") return;
  const auto& c = groups.coords();
  nlohmann::json rank = {
      {"rank", groups.rank()},
      {"world", groups.world()},
      {"sizes", {{"tp", sizes.tp}, {"cp", sizes.cp}, {"pp", sizes.pp}, {"dp", sizes.dp}, {"ep", sizes.ep}}},
      {"coords", {{"tp", c.tp}, {"cp", c.cp}, {"pp", c.pp}, {"dp", c.dp}, {"ep", c.ep}, {"expert_dp", c.expert_dp}}},
      {"params", described}};
  const std::string path = dir + "/" + rank_description_file(groups.rank());
  std::ofstream(path + ".tmp") << rank.dump(1) << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

}  // namespace loom::launch
