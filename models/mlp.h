// A transformer block's MLP, tensor parallel over tp: GPT-2's fc -> GELU (tanh) -> proj,
// or Llama's SwiGLU, proj(silu(gate x) * up x). The input-side layers (fc, or gate and
// up) are column parallel, each tp rank holding the matching slices of gate and up,
// which read one shared entry into the tp region; proj is row parallel.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "models/gpt_options.h"
#include "models/language_model.h"
#include "parallel/parallel_module.h"
#include "parallel/tensor_parallel.h"

namespace loom::models {

class MlpImpl : public parallel::ParallelModule {
 public:
  // NAME: the parameters' prefix ("h.LAYER.mlp." if empty); FFN: the width (options.ffn_hidden_size if 0).
  // An MoE block's shared experts are such an MLP (models/moe.h).
  MlpImpl(const GPTOptions& options, int64_t layer, TensorParallelContext tp, const std::string& name = "",
          int64_t ffn = 0);
  // x [B, S, H] ([B, S / tp, H] under sequence parallelism) -> the same shape.
  torch::Tensor forward(const torch::Tensor& x);

 private:
  TensorParallelContext tp_;
  parallel::ColumnParallelLinear fc_{nullptr};                  // gelu
  parallel::ColumnParallelLinear gate_{nullptr}, up_{nullptr};  // swiglu
  parallel::RowParallelLinear proj_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace loom::models
