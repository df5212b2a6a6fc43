#include "launch/document_reader.h"

#include <iterator>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace loom::launch {

namespace {

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string::npos;
}

}  // namespace

DocumentReader::DocumentReader(std::vector<std::string> inputs, bool split_paragraphs, std::string json_key)
    : inputs_(std::move(inputs)), split_paragraphs_(split_paragraphs), json_key_(std::move(json_key)) {}

bool DocumentReader::open_next_input() {
  if (next_input_ >= inputs_.size()) return false;
  path_ = inputs_[next_input_++];
  json_lines_ = is_json_lines(path_);
  in_ = std::make_unique<InputFile>(path_);
  line_ = 0;
  if (!json_lines_ && !split_paragraphs_) {  // one document: read whole
    std::string text((std::istreambuf_iterator<char>(in_->stream())), std::istreambuf_iterator<char>());
    close_input();
    queue(text, 1);
  }
  return true;
}

int64_t DocumentReader::bytes_read() const {
  return finished_bytes_ + (in_ ? in_->file_bytes_read() : 0);
}

void DocumentReader::close_input() {
  finished_bytes_ += in_->file_bytes_read();
  in_.reset();
}

void DocumentReader::queue(const std::string& text, int64_t first_line) {
  const std::string where = json_lines_ ? path_ + ":" + std::to_string(first_line) : path_;
  if (!split_paragraphs_) {
    queued_.push_back({text, where});
    return;
  }
  // A paragraph is a run of non-blank lines; its lines keep their newlines between them, not after the
  // last (a CRLF line's "\r\n" whole: the last line's '\r' goes with its newline).
  std::string paragraph, newline;
  int64_t line = first_line, paragraph_line = first_line;
  size_t at = 0;
  auto flush = [&] {
    if (!paragraph.empty()) {
      const std::string origin = json_lines_ ? where + " paragraph at text line " + std::to_string(paragraph_line)
                                             : path_ + ":" + std::to_string(paragraph_line);
      queued_.push_back({paragraph, origin});
    }
    paragraph.clear();
  };
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string current = text.substr(at, end - at);
    if (blank(current)) {
      flush();
    } else {
      if (paragraph.empty()) paragraph_line = json_lines_ ? line - first_line + 1 : line;
      if (!paragraph.empty()) paragraph += newline;
      const bool crlf = end < text.size() && !current.empty() && current.back() == '\r';
      if (crlf) current.pop_back();
      newline = crlf ? "\r\n" : "\n";
      paragraph += current;
    }
    at = end + 1;
    ++line;
  }
  flush();
}

void DocumentReader::queue_next_lines() {
  constexpr size_t kChunkBytes = 16 << 20;
  const int64_t first_line = line_ + 1;
  std::string chunk, line;
  std::istream& in = in_->stream();
  while (std::getline(in, line)) {
    ++line_;
    const bool last = in.eof();  // a last line without its newline
    chunk += line;
    if (!last) chunk += '\n';
    if (!last && chunk.size() >= kChunkBytes && blank(line)) break;
  }
  if (!in) close_input();
  queue(chunk, first_line);
}

bool DocumentReader::next(Document& doc) {
  try {
    return next_document(doc);
  } catch (const std::ios_base::failure& e) {  // the file system's read error, through the stream
    throw InputError("cannot read input file '" + path_ + "': " + e.what());
  }
}

bool DocumentReader::next_document(Document& doc) {
  while (true) {
    if (queued_at_ < queued_.size()) {
      doc = std::move(queued_[queued_at_++]);
      return true;
    }
    queued_.clear();
    queued_at_ = 0;
    if (!json_lines_ && in_) {
      queue_next_lines();
      continue;
    }
    if (json_lines_ && in_) {
      std::string line;
      if (std::getline(in_->stream(), line)) {
        ++line_;
        if (blank(line)) continue;
        const std::string where = path_ + ":" + std::to_string(line_);
        nlohmann::json json;
        try {
          json = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          throw InputError(where + ": not a JSON line (" + std::string(e.what()) + ")");
        }
        if (!json.is_object() || !json.contains(json_key_))
          throw InputError(where + ": the JSON line has no key '" + json_key_ + "' (set --json-key)");
        if (!json[json_key_].is_string()) throw InputError(where + ": key '" + json_key_ + "' is not a string");
        queue(json[json_key_].get<std::string>(), line_);
        continue;
      }
      close_input();
    }
    if (!open_next_input()) return false;
  }
}

}  // namespace loom::launch
