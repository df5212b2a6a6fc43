// libloom_sentencepiece: libsentencepiece behind a C interface, loaded by
// core/sentencepiece_tokenizer.cpp with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Why a plugin: Debian's libsentencepiece carries its own copy of protobuf-lite and
// exports its symbols. Linked into loom, those take the place of LibTorch's
// libprotobuf's own during its static initialisation, which crashes every loom
// command before main. Loaded locally with deep binding, each keeps its own protobuf.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(const std::string& message, char* error, size_t error_size) {
  if (error_size == 0) return;
  std::strncpy(error, message.c_str(), error_size - 1);
  error[error_size - 1] = '\0';
}

}  // namespace

extern "C" {

// A processor for the model at PATH, or null with the reason in ERROR.
void* loom_sentencepiece_load(const char* path, char* error, size_t error_size) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  const auto status = processor->Load(path);
  if (!status.ok()) {
    set_error(status.ToString(), error, error_size);
    delete processor;
    return nullptr;
  }
  return processor;
}

void loom_sentencepiece_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

// 0: piece count, 1: BOS id, 2: EOS id, 3: UNK id (-1 when the model has none).
int loom_sentencepiece_info(const void* processor, int which) {
  const auto* p = static_cast<const sentencepiece::SentencePieceProcessor*>(processor);
  return which == 0 ? p->GetPieceSize() : which == 1 ? p->bos_id() : which == 2 ? p->eos_id() : p->unk_id();
}

// The ids of TEXT (no BOS or EOS) into a malloc'd *IDS of *COUNT; false with ERROR on failure.
bool loom_sentencepiece_encode(const void* processor, const char* text, size_t size, int** ids, size_t* count,
                               char* error, size_t error_size) {
  std::vector<int> out;
  const auto status =
      static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->Encode(std::string(text, size), &out);
  if (!status.ok()) {
    set_error(status.ToString(), error, error_size);
    return false;
  }
  *count = out.size();
  *ids = static_cast<int*>(std::malloc(std::max<size_t>(1, out.size()) * sizeof(int)));
  std::memcpy(*ids, out.data(), out.size() * sizeof(int));
  return true;
}

// The text of IDS into a malloc'd *TEXT of *SIZE bytes; false with ERROR on failure.
bool loom_sentencepiece_decode(const void* processor, const int* ids, size_t count, char** text, size_t* size,
                               char* error, size_t error_size) {
  std::string out;
  const auto status = static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->Decode(
      std::vector<int>(ids, ids + count), &out);
  if (!status.ok()) {
    set_error(status.ToString(), error, error_size);
    return false;
  }
  *size = out.size();
  *text = static_cast<char*>(std::malloc(std::max<size_t>(1, out.size())));
  std::memcpy(*text, out.data(), out.size());
  return true;
}

// The piece of ID ("<s>" for Llama 2's BOS, which Decode leaves out) into PIECE, cut at SIZE - 1 bytes.
void loom_sentencepiece_piece(const void* processor, int id, char* piece, size_t size) {
  set_error(static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->IdToPiece(id), piece, size);
}

void loom_sentencepiece_release(void* memory) {
  std::free(memory);
}

}  // extern "C"
