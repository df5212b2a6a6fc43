#include "models/language_model.h"

#include "core/errors.h"

namespace loom::models {

PipelineModelFactory whole_model_only(ModelFactory make_model) {
  return [make_model = std::move(make_model)](const Config& config, TensorParallelContext tp,
                                              PipelinePosition position) -> std::shared_ptr<LanguageModel> {
    if (!position.whole()) {
      throw InputError(
          "config key 'parallel.pp': this model is built whole (a ModelFactory), so it cannot be split "
          "into " +
          std::to_string(position.count) +
          " pipeline pieces; set parallel.pp and parallel.virtual_stages to 1, or give train_main a "
          "PipelineModelFactory");
    }
    return make_model(config, tp);
  };
}

}  // namespace loom::models
