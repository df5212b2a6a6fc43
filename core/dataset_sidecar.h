// PREFIX.json beside a dataset's PREFIX.bin/.idx: which tokenizer made it, so that
// `loom train` can refuse a model whose vocabulary is too small before step 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace loom {

struct DatasetSidecar {
  std::string tokenizer;         // Tokenizer::kind(): "byte", "sentencepiece", "hf-bpe"
  std::string tokenizer_source;  // Tokenizer::source(), absolute (relative in sidecars before 2026-12-05)
  // The CRC-32C of the tokenizer's file (tokenizer.json for a directory) when it made the data;
  // nullopt for the byte tokenizer and in older sidecars.
  std::optional<uint32_t> tokenizer_crc32c;
  int64_t vocab_size = 0;  // every id in the dataset is below this
  int64_t bos_id = -1;     // -1: none
  int64_t eos_id = -1;
  int64_t max_token_id = -1;  // the largest id actually written
  int64_t documents = 0;
  int64_t tokens = 0;
  std::string dtype;  // "uint16" or "int32"
  // Whether each document starts with BOS (--add-bos) and ends with EOS (--append-eod); nullopt in
  // a sidecar written before they were recorded.
  std::optional<bool> add_bos, append_eod;
};

std::string sidecar_path(const std::string& prefix);
// Whether PREFIX.json is a sidecar loom prepare wrote (its "format"), and so a dataset's to replace.
bool is_dataset_sidecar(const std::string& prefix);
// Written through a temporary and a rename: a sidecar is whole or absent.
void write_sidecar(const std::string& prefix, const DatasetSidecar& sidecar);
// nullopt when PREFIX.json does not exist (datasets made elsewhere); an InputError naming the file
// and key when it exists but cannot be read.
std::optional<DatasetSidecar> read_sidecar(const std::string& prefix);

}  // namespace loom
