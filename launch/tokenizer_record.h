// The tokenizer a run's data was made with, kept in every checkpoint's manifest ("tokenizer") so
// that `loom generate CHECKPOINT` decodes with it instead of guessing: a SentencePiece-trained
// model read back as bytes prints nothing useful. The record names the tokenizer's kind, its file
// (absolute) and the file's CRC-32C, so a file that moved or changed since training is refused
// rather than silently decoding other text.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/config.h"

namespace loom::launch {

// {"kind": "byte" | "sentencepiece" | "hf-bpe", "file": ABSOLUTE PATH, "crc32c": N, "vocab_size": N
// (the ids the tokenizer knows, from the dataset's sidecar; 0: not known), "add_bos": whether the
// data's documents start with BOS (where the sidecar says)}
// ("file" and "crc32c" for a file-backed tokenizer): from the sidecar of data.path's first dataset
// (loom prepare's PREFIX.json), else model.init_from's tokenizer.json or tokenizer.model; null when
// neither says (the built-in synthetic corpus, a dataset made elsewhere).
nlohmann::json tokenizer_record(const Config& config);

// The absolute path of the tokenizer SOURCE names (a file, or a directory with its tokenizer.json):
// the file itself, a relative SOURCE read from the current directory.
std::string tokenizer_path(const std::string& source);
// The CRC-32C of that file; nullopt when there is none.
std::optional<uint32_t> tokenizer_file_crc(const std::string& source);

// What `loom generate` loads for RECORD, a checkpoint's (SOURCE names it): "byte" or the file.
// Throws InputError when the file is gone or changed since training, saying to give --tokenizer.
std::string tokenizer_of_record(const nlohmann::json& record, const std::string& source);

}  // namespace loom::launch
