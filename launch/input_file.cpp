#include "launch/input_file.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <vector>

#include "core/errors.h"

namespace loom::launch {

namespace {

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* format_name(Compression kind) {
  return kind == Compression::gzip ? "gzip" : "zstd";
}

// The text of a compressed file, decompressed a buffer at a time as the stream reads it (memory
// stays flat whatever the file's size). A file may hold several gzip members or zstd frames one
// after another (`cat a.gz b.gz`), read as one text, as gzip -d and zstd -d read it.
class DecompressingBuffer : public std::streambuf {
 public:
  DecompressingBuffer(std::string path, Compression kind)
      : path_(std::move(path)), kind_(kind), in_(1 << 16), out_(1 << 18) {
    file_.open(path_, std::ios::binary);
    if (!file_) throw InputError("cannot read input file '" + path_ + "'");
    if (kind_ == Compression::gzip) {
      // 15 + 32: the largest window, and a gzip (or zlib) header recognised by itself.
      if (inflateInit2(&zlib_, 15 + 32) != Z_OK) throw std::runtime_error("zlib: inflateInit2 failed");
    } else {
      zstd_ = ZSTD_createDStream();
      if (zstd_ == nullptr) throw std::runtime_error("zstd: ZSTD_createDStream failed");
      // Windows up to 2 GiB, as `zstd --long=31` writes them and `zstd -d --long=31` reads them
      // (the library's default stops at 128 MiB and calls such a file too demanding).
      ZSTD_DCtx_setParameter(zstd_, ZSTD_d_windowLogMax, 31);
    }
  }
  ~DecompressingBuffer() override {
    if (kind_ == Compression::gzip) inflateEnd(&zlib_);
    if (zstd_ != nullptr) ZSTD_freeDStream(zstd_);
  }
  DecompressingBuffer(const DecompressingBuffer&) = delete;
  DecompressingBuffer& operator=(const DecompressingBuffer&) = delete;

  int64_t consumed() const { return file_offset_ - static_cast<int64_t>(in_size_ - in_at_); }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    while (true) {
      if (in_at_ == in_size_ && !file_done_) refill();
      // With no input left the decoder may still hold output from a call that filled the buffer.
      const size_t produced = decompress();
      if (produced > 0) {
        setg(out_.data(), out_.data(), out_.data() + produced);
        return traits_type::to_int_type(out_[0]);
      }
      if (in_at_ == in_size_ && file_done_) {
        if (!inside_ && members_ == 0) {  // as gzip -d and zstd -d refuse it: an empty download is no corpus
          throw InputError("input '" + path_ + "' holds no " + format_name(kind_) +
                           " data (empty, or zeros: a download or copy that failed?)");
        }
        if (inside_) {
          throw InputError("input '" + path_ + "' ends in the middle of its " + format_name(kind_) + " data, after " +
                           std::to_string(file_offset_) + " bytes: is it cut off (a download or copy that stopped)?");
        }
        return traits_type::eof();
      }
    }
  }

 private:
  void refill() {
    file_.read(in_.data(), static_cast<std::streamsize>(in_.size()));
    if (file_.bad()) throw InputError("cannot read input file '" + path_ + "'");
    in_size_ = static_cast<size_t>(file_.gcount());
    in_at_ = 0;
    file_offset_ += static_cast<int64_t>(in_size_);
    if (in_size_ == 0) file_done_ = true;
  }

  // (The position is where the decoder was given the bytes it refused: zstd takes a whole read at once.)
  [[noreturn]] void damaged(const std::string& why) const {
    throw InputError("input '" + path_ + "' cannot be read as " + format_name(kind_) + " data from byte " +
                     std::to_string(consumed()) + " of the file on (" + why + "): a name ending in " +
                     (kind_ == Compression::gzip ? ".gz" : ".zst or .zstd") + " is read through " + format_name(kind_) +
                     "; is the file that, and whole?");
  }

  // Decompresses what input there is into the output buffer; the bytes it produced.
  size_t decompress() {
    if (kind_ == Compression::gzip && !inside_) {
      // Zeros between or after members are padding (a tape's or a block device's), which gzip -d
      // and Python's gzip pass over.
      while (in_at_ < in_size_ && in_[in_at_] == '\0') ++in_at_;
    }
    const size_t available = in_size_ - in_at_;
    if (kind_ == Compression::gzip) {
      zlib_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_at_);
      zlib_.avail_in = static_cast<uInt>(available);
      zlib_.next_out = reinterpret_cast<Bytef*>(out_.data());
      zlib_.avail_out = static_cast<uInt>(out_.size());
      const int code = inflate(&zlib_, Z_NO_FLUSH);
      const size_t used = available - zlib_.avail_in;
      in_at_ += used;
      if (code == Z_STREAM_END) {
        inside_ = false;  // a member ends; what follows, if anything, is the next member
        ++members_;
        inflateReset(&zlib_);
      } else if (code == Z_OK) {
        inside_ = true;
      } else if (code != Z_BUF_ERROR) {  // Z_BUF_ERROR: no progress possible without more input
        damaged(std::string("zlib: ") + (zlib_.msg != nullptr ? zlib_.msg : zError(code)));
      } else if (used > 0) {
        inside_ = true;
      }
      return out_.size() - zlib_.avail_out;
    }
    ZSTD_inBuffer input{in_.data() + in_at_, available, 0};
    ZSTD_outBuffer output{out_.data(), out_.size(), 0};
    const size_t code = ZSTD_decompressStream(zstd_, &output, &input);
    if (ZSTD_isError(code)) damaged(std::string("zstd: ") + ZSTD_getErrorName(code));
    in_at_ += input.pos;
    // 0: a frame is complete and flushed; the next bytes, if any, begin another.
    if (input.pos > 0 || output.pos > 0) {
      if (code == 0) ++members_;  // (a call ends one frame at most)
      inside_ = code != 0;
    }
    return output.pos;
  }

  std::string path_;
  Compression kind_;
  std::ifstream file_;
  std::vector<char> in_, out_;
  size_t in_at_ = 0, in_size_ = 0;
  int64_t file_offset_ = 0;
  bool file_done_ = false;
  bool inside_ = false;  // within a member or frame: the file must not end here
  int64_t members_ = 0;  // gzip members or zstd frames read whole
  z_stream zlib_{};
  ZSTD_DStream* zstd_ = nullptr;
};

// A plain file, with its read position for the progress bar.
class PlainBuffer : public std::filebuf {
 public:
  explicit PlainBuffer(const std::string& path) {
    if (open(path, std::ios::in | std::ios::binary) == nullptr)
      throw InputError("cannot read input file '" + path + "'");
  }
  int64_t consumed() { return static_cast<int64_t>(pubseekoff(0, std::ios::cur, std::ios::in)); }
};

}  // namespace

std::string binary_format_of(const std::string& head) {
  // Text holds no control bytes but tab, newline, vertical tab, form feed and carriage return; each
  // format below has some in its first bytes. A text that merely begins with a magic ("PAR1 ...") is text.
  // (Other control bytes, ESC's colour codes in a log, are text's.)
  const bool control = std::any_of(head.begin(), head.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x09 || (byte > 0x0d && byte < 0x20);
  });
  if (!control) return "";
  auto starts = [&](const std::string& magic, size_t at = 0) {
    return head.size() >= at + magic.size() && head.compare(at, magic.size(), magic) == 0;
  };
  if (starts("PAR1")) return "Parquet (write its text column as JSON lines first, e.g. with pandas or datasets)";
  if (starts("ARROW1")) return "an Arrow file (write its text column as JSON lines first)";
  if (starts(std::string("PK\x03\x04", 4))) return "a zip archive (unpack it and give the files inside)";
  if (starts("ustar", 257)) return "a tar archive (unpack it and give the files inside)";
  if (starts("\x1f\x8b")) return "gzip data (a name ending in .gz reads it through gzip)";
  if (starts("\x28\xb5\x2f\xfd")) return "zstd data (a name ending in .zst reads it through zstd)";
  if (starts("BZh") && head.size() > 3 && head[3] >= '1' && head[3] <= '9') return "bzip2 data (decompress it first)";
  if (starts(std::string("\xfd"
                         "7zXZ\x00",
                         6)))
    return "xz data (decompress it first)";
  if (starts(std::string("MMIDIDX\x00\x00", 9)))
    return "a Megatron-LM index (already a dataset: data.path takes its PREFIX)";
  if (starts("\xff\xfe") || starts("\xfe\xff"))
    return "UTF-16 or UTF-32 text (convert it to UTF-8 first: iconv -f UTF-16 -t UTF-8)";
  if (starts("\xff\xff\xff\xff"))
    return "an Arrow stream (Hugging Face datasets' *.arrow files: write the text column as JSON lines first)";
  // Text has no NUL byte (git and grep call a file with one binary): token ids (a Megatron-LM .bin),
  // UTF-16 without its byte order mark, any other binary format.
  if (head.find('\0') != std::string::npos) return "binary data (NUL bytes in its first 512; text has none)";
  return "";
}

Compression compression_of(const std::string& path) {
  const std::string name = lower(path);
  if (ends_with(name, ".gz")) return Compression::gzip;
  if (ends_with(name, ".zst") || ends_with(name, ".zstd")) return Compression::zstd;
  return Compression::none;
}

std::string without_compression_suffix(const std::string& path) {
  if (compression_of(path) == Compression::none) return path;
  return path.substr(0, path.rfind('.'));
}

bool is_json_lines(const std::string& path) {
  const std::string name = lower(without_compression_suffix(path));
  return ends_with(name, ".jsonl") || ends_with(name, ".json") || ends_with(name, ".ndjson");
}

InputFile::InputFile(const std::string& path) {
  const Compression kind = compression_of(path);
  if (kind == Compression::none) {
    buffer_ = std::make_unique<PlainBuffer>(path);
  } else {
    buffer_ = std::make_unique<DecompressingBuffer>(path, kind);
  }
  stream_ = std::make_unique<std::istream>(buffer_.get());
  // A failed read (a damaged file) throws its InputError through the stream's operations.
  stream_->exceptions(std::ios::badbit);
}

InputFile::~InputFile() = default;

int64_t InputFile::file_bytes_read() const {
  if (auto* plain = dynamic_cast<PlainBuffer*>(buffer_.get())) return plain->consumed();
  return static_cast<const DecompressingBuffer*>(buffer_.get())->consumed();
}

}  // namespace loom::launch
