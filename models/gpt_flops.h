// Model FLOPs of the GPT and model FLOPs utilisation (MFU).
//
// The convention of PaLM (Chowdhery et al., appendix B) and Megatron-LM: a
// token costs 6 FLOPs per weight it meets in a matrix product (2 forward, 4
// backward) plus 12 L h S for attention's two S x S products, counted whole
// even though the causal half is masked (loom skips most of it: that is
// speed, not model FLOPs). Recomputation is not counted either. Embedding
// lookups cost nothing; the output layer does (V x h), tied or not. Llama
// shapes count SwiGLU's three matrices and GQA's smaller key and value
// projections; attention's products still use every query head. An MoE layer
// counts its router and top_k experts. Multi-token prediction's modules count
// their eh_proj, their block and the output layer again.
#pragma once

#include "core/config.h"

namespace loom::models {

// Training FLOPs per token of CONFIG's GPT.
double gpt_flops_per_token(const Config& config);

}  // namespace loom::models
