// The documents of `loom prepare`'s inputs, in order: a plain text file is one
// document (or one per blank-line separated paragraph), a JSON lines file
// (*.jsonl, *.json) one per line, its text under a key.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

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
  // Input bytes consumed so far, for the progress bar.
  int64_t bytes_read() const { return bytes_read_; }

 private:
  bool open_next_input();
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
  std::ifstream in_;
  int64_t line_ = 0;
  int64_t bytes_read_ = 0;
  std::vector<Document> queued_;
  size_t queued_at_ = 0;
};

// Whether PATH is read as JSON lines.
bool is_json_lines(const std::string& path);

}  // namespace loom::launch
