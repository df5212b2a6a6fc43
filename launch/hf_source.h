// What a model fine-tuned from a Hugging Face directory (model.init_from) came with: its
// config.json and generation_config.json, kept in every checkpoint's manifest ("hf_source") so
// that `loom export --format hf` writes the architecture and the fields the model was given (its
// context length, token ids, rope settings), not only the ones loom trains with.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom::launch {

// {"config": config.json, "generation_config": generation_config.json (when there is one)} of the
// Hugging Face directory INIT_FROM; null when INIT_FROM is empty or not such a directory.
nlohmann::json read_hf_source(const std::string& init_from);

// The config.json of an export: LOOM_CONFIG (what loom derives from the model, core/hf_config.h)
// laid over SOURCE's config (read_hf_source; null: LOOM_CONFIG alone). The source keeps its
// architecture when KEEP_ARCHITECTURE (--format hf), its max_position_embeddings (a model trained
// at a shorter length keeps its context; GPT-2's learned positions are cut to what was trained),
// its rope settings in transformers 5's rope_parameters form, and every field loom does not know
// (bos/eos ids among them). The weights are float32, and the dtype says so.
nlohmann::ordered_json exported_hf_config(const nlohmann::ordered_json& loom_config, const nlohmann::json& source,
                                          bool keep_architecture);

// generation_config.json of an export: the source's, else the token ids CONFIG names.
// The ids Hugging Face's generate stops at for SOURCE (read_hf_source): generation_config.json's
// eos_token_id (an id or a list), else, without that file, config.json's; empty when neither names
// one (or SOURCE is null). WHERE names SOURCE in errors.
std::vector<int64_t> hf_stop_ids(const nlohmann::json& source, const std::string& where);
// The id Hugging Face's generate starts an empty prompt from: bos_token_id, from the same file as
// hf_stop_ids reads; -1 when it names none.
int64_t hf_bos_id(const nlohmann::json& source);
nlohmann::ordered_json exported_generation_config(const nlohmann::ordered_json& config, const nlohmann::json& source);

}  // namespace loom::launch
