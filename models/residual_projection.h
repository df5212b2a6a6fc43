// The row-parallel projection that ends a block's attention or MLP and feeds the
// residual stream: GPT-2's scaled init (models/gpt_options.h), biases by model.bias,
// its input already split over tp, its output reduce-scattered under sequence parallelism.
#pragma once

#include <string>

#include "models/gpt_options.h"
#include "models/language_model.h"
#include "parallel/tensor_parallel.h"

namespace loom::models {

inline parallel::RowParallelLinear residual_projection(const std::string& name, int64_t in_features,
                                                       const GPTOptions& options, const TensorParallelContext& tp) {
  return parallel::RowParallelLinear(parallel::RowParallelLinearOptions(in_features, options.hidden_size)
                                         .name(name)
                                         .seed(options.seed)
                                         .bias(options.bias)
                                         .init_std(residual_init_std(options))
                                         .input_is_parallel(true)
                                         .sequence_parallel(tp.sequence_parallel),
                                     *tp.tp);
}

}  // namespace loom::models
