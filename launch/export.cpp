// loom export: a checkpoint's model as a Hugging Face GPT-2 safetensors file.
#include <filesystem>
#include <iostream>

#include "core/checkpoint_store.h"
#include "core/config.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "launch/commands.h"
#include "models/gpt_hf.h"

namespace loom::launch {

int export_checkpoint(const ExportArgs& args) {
  if (args.format != "hf-gpt2") throw InputError("--format '" + args.format + "' is not known; use hf-gpt2");
  const std::string problem = verify_checkpoint(args.checkpoint);
  if (!problem.empty()) throw InputError("loom export: " + problem);
  const auto manifest = read_manifest(args.checkpoint);
  if (manifest.at("model").contains("moe_num_experts")) {
    throw InputError("loom export: " + args.checkpoint + " holds a Mixture-of-Experts model (" +
                     manifest.at("model").at("moe_num_experts").dump() +
                     " experts); the hf-gpt2 format has dense MLPs only");
  }
  std::map<std::string, torch::Tensor> tensors;
  const std::string prefix = "model/";
  for (const auto& [name, info] : manifest.at("tensors").items()) {
    if (name.rfind(prefix, 0) != 0) continue;
    tensors[name.substr(prefix.size())] = *read_tensor_slice(args.checkpoint, manifest, name, -1, 0, 0);
  }
  const auto& model = manifest.at("model");
  const auto hf =
      models::gpt_to_hf(tensors, model.at("num_layers").get<int64_t>(), model.at("num_heads").get<int64_t>());
  write_safetensors(
      args.output, hf,
      {{"format", "pt"}, {"source", "loom"}, {"step", std::to_string(manifest.at("step").get<int64_t>())}});
  int64_t parameters = 0;
  for (const auto& [name, t] : hf) parameters += t.numel();
  std::cout << "wrote " << args.output << ": " << hf.size() << " tensors, " << parameters
            << " parameters, Hugging Face GPT-2 names and layout, from step " << manifest.at("step") << "\n";
  return 0;
}

}  // namespace loom::launch
