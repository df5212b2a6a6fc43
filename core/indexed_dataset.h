// Megatron-LM's indexed dataset: PREFIX.idx holds the index, PREFIX.bin the tokens.
//
// PREFIX.idx, little-endian:
//   9 bytes  magic "MMIDIDX\0\0"
//   u64      version (1)
//   u8       dtype code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16)
//   u64      sequence count S
//   u64      document count D
//   i32[S]   sequence lengths in tokens
//   i64[S]   sequence byte offsets into PREFIX.bin
//   i64[D]   document index: sequence numbers where documents start, then S
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace loom {

enum class TokenDtype : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

size_t dtype_size(TokenDtype dtype);

// Read-only view of a dataset; the .bin file is memory-mapped, the index read whole.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  TokenDtype dtype() const { return dtype_; }
  size_t num_sequences() const { return lengths_.size(); }
  const std::vector<int32_t>& sequence_lengths() const { return lengths_; }
  const std::vector<int64_t>& sequence_offsets() const { return offsets_; }
  const std::vector<int64_t>& document_index() const { return documents_; }

  // Copies COUNT tokens of sequence SEQ starting at token OFFSET into OUT, widened to int64.
  void read(size_t seq, int64_t offset, int64_t count, int64_t* out) const;
  // The largest token id of every sequence (-1 when empty): one pass over the mapped file.
  int64_t max_token_id() const { return token_id_range().second; }
  // The smallest and largest token ids ({0, -1} when empty): one pass over the mapped file.
  std::pair<int64_t, int64_t> token_id_range() const;
  size_t bin_bytes() const { return data_bytes_; }

 private:
  std::string prefix_;
  TokenDtype dtype_ = TokenDtype::u16;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> documents_;
  const uint8_t* data_ = nullptr;
  size_t data_bytes_ = 0;
};

// PREFIX.idx's header alone, no array read (cheap for any size): its dtype and sequence count.
struct IndexHeader {
  TokenDtype dtype = TokenDtype::u16;
  uint64_t sequences = 0;
};
IndexHeader read_index_header(const std::string& prefix);

// Whether PREFIX.idx exists and has a Megatron-LM index's header (read_index_header reads it).
bool is_indexed_dataset(const std::string& prefix);

// Writes a dataset in the same format; each add_document call is one document of one sequence.
class IndexedDatasetWriter {
 public:
  // Writes into PREFIX.bin.tmp and PREFIX.idx.tmp: an existing dataset at PREFIX is
  // replaced only by a complete one, and a writer destroyed before finish() removes its temporaries.
  IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;
  void add_document(const std::vector<int64_t>& tokens);
  // Writes the index and renames both files into place; the dataset is complete only after this.
  void finish();

 private:
  std::string prefix_;
  TokenDtype dtype_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> documents_{0};
  std::ofstream bin_;
  bool finished_ = false;
};

}  // namespace loom
