// The documents of `loom prepare`'s inputs, in order: a plain text file is one
// document (or one per blank-line separated paragraph), a JSON lines file
// (*.jsonl, *.json) one per line, its text under a key; either may be compressed
// (*.gz, *.zst: launch/input_file.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launch/input_file.h"

namespace loom::launch {

struct Document {
  std::string text;
  std::string origin;  // "FILE", "FILE:LINE": where errors about it point
};

class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> inputs, bool split_paragraphs, std::string json_key);
  // The next document into DOC; false when all inputs are read. A bad JSON line is an InputError naming FILE:LINE.
  bool next(Document& doc);
  // Bytes of the input files consumed so far (compressed bytes for a compressed file), for the
  // progress bar against their sizes on disk.
  int64_t bytes_read() const;

 private:
  bool next_document(Document& doc);
  bool open_next_input();
  void close_input();  // the input read to its end
  // Queues TEXT as one document, or its paragraphs; FIRST_LINE numbers the origins.
  void queue(const std::string& text, int64_t first_line);
  // A plain text file read by paragraphs: queues its next lines, up to a blank line once they hold
  // enough bytes (so no paragraph is cut), and closes the file at its end. Memory stays flat
  // whatever the file's size.
  void queue_next_lines();

  std::vector<std::string> inputs_;
  bool split_paragraphs_;
  std::string json_key_;
  size_t next_input_ = 0;
  std::string path_;
  bool json_lines_ = false;
  std::unique_ptr<InputFile> in_;  // the input being read by lines; null between inputs
  int64_t line_ = 0;
  int64_t finished_bytes_ = 0;  // the sizes of the inputs read to their end
  std::vector<Document> queued_;
  size_t queued_at_ = 0;
};

}  // namespace loom::launch
