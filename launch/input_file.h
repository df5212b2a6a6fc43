// One of `loom prepare`'s input files as a stream of its text: read as it is, or through gzip or
// zstd when its name ends in .gz, .zst or .zstd, as corpora are shipped (Dolma's *.json.gz, the
// Pile's *.jsonl.zst) and as Hugging Face's datasets library reads them, so that a corpus need not
// be unpacked to disk first.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <streambuf>
#include <string>

namespace loom::launch {

enum class Compression { none, gzip, zstd };

// How PATH is read, by its name's last suffix (any case).
Compression compression_of(const std::string& path);

// PATH without a compression suffix ("a.jsonl.gz" -> "a.jsonl"): the name that says the format.
std::string without_compression_suffix(const std::string& path);

// Whether PATH is read as JSON lines: *.jsonl, *.json or *.ndjson (any case), compressed or not.
bool is_json_lines(const std::string& path);

// What HEAD (a file's first bytes, as read: decompressed) shows the file to be when that is a binary
// format rather than text (Parquet, an archive, compressed data under a plain name, a Megatron-LM
// index): a few words naming it and what to do, else "". Read as text such a file trains on garbage.
std::string binary_format_of(const std::string& head);

class InputFile {
 public:
  // Opens PATH; an InputError names it when it cannot be read. Data that is not what the name says
  // (a *.gz that is no gzip), damaged or cut off is an InputError naming the file when it is read.
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // The text; a read that fails throws (its badbit is an exception).
  std::istream& stream() { return *stream_; }
  // Bytes of the file itself consumed so far (compressed bytes for a compressed file): the
  // progress against the inputs' sizes on disk.
  int64_t file_bytes_read() const;

 private:
  std::unique_ptr<std::streambuf> buffer_;
  std::unique_ptr<std::istream> stream_;
};

}  // namespace loom::launch
