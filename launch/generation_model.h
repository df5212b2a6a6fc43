// The model `loom generate` runs, from what MODEL names: a loom checkpoint (a
// step_N directory, or a checkpoint.dir whose `latest` is followed, else its
// newest), whose manifest records the model's keys, or a Hugging Face model
// directory (config.json and safetensors), read as model.init_from reads one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "parallel/parallel_parameter.h"

namespace loom::launch {

struct GenerationModel {
  Config config;     // the model's keys, then the --set overrides (parallel.tp, ...)
  std::string path;  // the checkpoint or directory MODEL resolved to
  bool hugging_face = false;
  int64_t max_positions = 0;      // the positions the model was made for: model.seq_len, n_positions, ...
  std::string max_positions_key;  // what sets them, for messages: "model.seq_len", "sliding_window", or empty
  std::string tokenizer;          // the tokenizer MODEL carries (a Hugging Face tokenizer.json or .model); empty: none
  // A checkpoint's record of the tokenizer its data was made with (launch/tokenizer_record.h; null:
  // none), and the ids that tokenizer knew (0: not recorded).
  nlohmann::json tokenizer_record;
  int64_t tokenizer_vocab_size = 0;
  // The ids generation stops at, as Hugging Face's generate takes them from the model's
  // generation_config.json or config.json (a checkpoint's: those of the directory it was
  // initialised from). Empty: a Hugging Face model (or a checkpoint initialised from one) runs to
  // --max-new-tokens, as generate does; a model loom trained from scratch stops at its
  // tokenizer's end-of-sequence token.
  std::vector<int64_t> stop_ids;
  bool from_hugging_face_source = false;
  // The id an empty prompt starts from where the model names one (hf_bos_id); -1: the tokenizer's BOS.
  int64_t bos_id = -1;
};

// Reads MODEL's description, without its weights, and applies OVERRIDES. Throws InputError
// naming MODEL when it is neither kind or cannot be read, and naming the key when an override
// would change the model a checkpoint holds.
GenerationModel describe_generation_model(const std::string& model, const std::vector<std::string>& overrides);

// MODEL's expert biases (launch/moe_metrics.h): a checkpoint's, or a Hugging Face directory's
// e_score_correction_bias; empty when it has none.
std::vector<std::vector<double>> generation_expert_bias(const GenerationModel& model);

// Reads into PARAMS this tp rank's slices of MODEL's weights.
void load_generation_weights(const GenerationModel& model, const std::vector<parallel::ParallelParameter>& params,
                             int64_t tp_rank, int64_t tp_size);

}  // namespace loom::launch
