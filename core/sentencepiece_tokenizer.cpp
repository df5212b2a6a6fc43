#include "core/sentencepiece_tokenizer.h"

#include <dlfcn.h>

#include <filesystem>
#include <sstream>
#include <utility>

#include "core/errors.h"
#include "core/tokenizer_config.h"

namespace loom {

namespace {

constexpr const char* kPlugin = "libloom_sentencepiece.so";

// Beside the executable (build/, or an installed bin/ with ../lib), then where the build and install put it.
std::vector<std::string> plugin_candidates() {
  std::vector<std::string> paths;
  std::error_code error;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    paths.push_back((exe.parent_path() / kPlugin).string());
    paths.push_back((exe.parent_path().parent_path() / "lib" / kPlugin).string());
  }
  std::stringstream dirs(LOOM_PLUGIN_DIRS);
  for (std::string dir; std::getline(dirs, dir, ':');) paths.push_back(dir + "/" + kPlugin);
  return paths;
}

void* open_plugin() {
  std::string tried;
  for (const auto& path : plugin_candidates()) {
    if (!std::filesystem::exists(path)) {
      tried += " " + path;
      continue;
    }
    // Local and deep-bound: the plugin's protobuf copy must not meet LibTorch's.
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (library == nullptr) throw std::runtime_error(std::string("cannot load ") + path + ": " + dlerror());
    return library;
  }
  throw std::runtime_error(std::string("SentencePiece tokenizers need ") + kPlugin + ", not found in:" + tried);
}

template <typename F>
F symbol(void* library, const char* name) {
  void* address = dlsym(library, name);
  if (address == nullptr) throw std::runtime_error(std::string(kPlugin) + " lacks " + name);
  return reinterpret_cast<F>(address);
}

// A model file may sit anywhere, beside anything: a tokenizer_config.json there that is not JSON is
// not this tokenizer's business, and leaves the default: no BOS, as the sentencepiece library
// encodes and as transformers 5.17's LlamaTokenizer does without add_bos_token (its docstring
// says true; its code and tests/reference/sp_adds_bos.py say false).
bool adds_bos_beside(const std::string& path) {
  try {
    return add_bos_token(tokenizer_config_beside(path)).value_or(false);
  } catch (const InputError&) {
    return false;
  }
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path) : path_(path) {
  library_ = open_plugin();
  try {
    encode_ = symbol<Encode>(library_, "loom_sentencepiece_encode");
    decode_ = symbol<Decode>(library_, "loom_sentencepiece_decode");
    release_ = symbol<Release>(library_, "loom_sentencepiece_release");
    free_ = symbol<Free>(library_, "loom_sentencepiece_free");
    const auto load = symbol<void* (*)(const char*, char*, size_t)>(library_, "loom_sentencepiece_load");
    const auto info = symbol<int (*)(const void*, int)>(library_, "loom_sentencepiece_info");
    char error[512] = "";
    processor_ = load(path.c_str(), error, sizeof(error));
    if (processor_ == nullptr)
      throw InputError("--tokenizer '" + path + "' is not a readable SentencePiece model: " + error);
    vocab_size_ = info(processor_, 0);
    bos_id_ = info(processor_, 1);
    eos_id_ = info(processor_, 2);
    const int64_t unk_id = info(processor_, 3);
    const auto piece = symbol<void (*)(const void*, int, char*, size_t)>(library_, "loom_sentencepiece_piece");
    for (auto [id, text] :
         {std::pair{bos_id_, &bos_piece_}, std::pair{eos_id_, &eos_piece_}, std::pair{unk_id, &unk_piece_}}) {
      char buffer[256] = "";
      if (id >= 0) piece(processor_, static_cast<int>(id), buffer, sizeof(buffer));
      *text = buffer;
    }
    // transformers' Llama tokenizer adds BOS when tokenizer_config.json says add_bos_token true (as
    // Llama 2's releases do, and loom export for a model whose data had it).
    adds_bos_ = bos_id_ >= 0 && adds_bos_beside(path);
  } catch (...) {
    dlclose(library_);
    throw;
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (processor_ != nullptr) free_(processor_);
  dlclose(library_);
}

std::vector<int64_t> SentencePieceTokenizer::encode(const std::string& text) const {
  int* ids = nullptr;
  size_t count = 0;
  char error[512] = "";
  // Encode fails only on a model that failed to load, which the constructor refuses.
  if (!encode_(processor_, text.data(), text.size(), &ids, &count, error, sizeof(error)))
    throw std::runtime_error(std::string("SentencePiece encode failed: ") + error);
  std::vector<int64_t> out(ids, ids + count);
  release_(ids);
  return out;
}

std::string SentencePieceTokenizer::special_token_text(int64_t id) const {
  return id == bos_id_ ? bos_piece_ : id == eos_id_ ? eos_piece_ : decode({id});
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= 0 && id < vocab_size_) narrow.push_back(static_cast<int>(id));
  }
  char* text = nullptr;
  size_t size = 0;
  char error[512] = "";
  if (!decode_(processor_, narrow.data(), narrow.size(), &text, &size, error, sizeof(error)))
    throw std::runtime_error(std::string("SentencePiece decode failed: ") + error);
  std::string out(text, size);
  release_(text);
  return out;
}

}  // namespace loom
