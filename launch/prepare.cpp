// loom prepare: raw text files to a Megatron-LM indexed dataset. With the byte
// tokenizer each byte is its token id (0-255) and each input file is one
// document; --append-eod ends every document with token 256.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "core/errors.h"
#include "core/indexed_dataset.h"
#include "launch/commands.h"

namespace loom::launch {

int prepare(const PrepareArgs& args) {
  if (args.tokenizer != "byte") {
    throw InputError("--tokenizer '" + args.tokenizer + "' is not known; the tokenizers are: byte");
  }
  constexpr int64_t kEod = 256;
  // Every input is checked before anything is written: a bad one leaves no partial dataset.
  for (const auto& path : args.inputs) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      throw InputError("input '" + path + "' is a directory; give the text files inside it (--input DIR/*.txt)");
    }
    if (!std::ifstream(path, std::ios::binary)) throw InputError("cannot read input file '" + path + "'");
  }
  IndexedDatasetWriter writer(args.output_prefix, TokenDtype::u16);
  int64_t tokens = 0;
  for (const auto& path : args.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read input file '" + path + "'");
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int64_t> document;
    document.reserve(bytes.size() + 1);
    for (char c : bytes) document.push_back(static_cast<unsigned char>(c));
    if (args.append_eod) document.push_back(kEod);
    tokens += static_cast<int64_t>(document.size());
    writer.add_document(document);
  }
  writer.finish();
  std::cout << "wrote " << args.output_prefix << ".bin and .idx: " << args.inputs.size() << " documents, " << tokens
            << " tokens (byte tokenizer, vocabulary " << (args.append_eod ? 257 : 256) << ")" << std::endl;
  return 0;
}

}  // namespace loom::launch
