// loom prepare: text files to a Megatron-LM indexed dataset, one sequence per
// document, and the PREFIX.json sidecar naming the tokenizer. Documents are read in
// batches and tokenized by --workers threads; each batch is written in input order,
// so the output does not depend on the number of workers.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <iostream>
#include <thread>

#include "core/dataset_sidecar.h"
#include "core/errors.h"
#include "core/indexed_dataset.h"
#include "core/tokenizer.h"
#include "launch/commands.h"
#include "launch/directory_lock.h"
#include "launch/document_reader.h"
#include "launch/input_file.h"
#include "launch/progress_bar.h"
#include "launch/tokenizer_record.h"

namespace loom::launch {

namespace {

// A batch big enough to keep every worker busy, small enough to keep memory flat.
constexpr size_t kBatchDocuments = 1024;
constexpr size_t kBatchBytes = 16 << 20;

// Every input is checked before anything is written: a bad one leaves no partial dataset.
int64_t check_inputs(const std::vector<std::string>& inputs) {
  int64_t bytes = 0;
  for (const auto& path : inputs) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      throw InputError("input '" + path + "' is a directory; give the text files inside it (--input DIR/*.txt)");
    }
    // (A regular file before opening: a named pipe would wait for its writer.)
    if (!std::filesystem::is_regular_file(path, error)) throw InputError("cannot read input file '" + path + "'");
    // Its first bytes as read (through gzip or zstd for such a name): a binary file read as text
    // would train on garbage without a word.
    InputFile file(path);
    std::string head(512, '\0');
    try {
      file.stream().read(head.data(), static_cast<std::streamsize>(head.size()));
    } catch (const std::ios_base::failure& e) {
      throw InputError("cannot read input file '" + path + "': " + e.what());
    }
    head.resize(static_cast<size_t>(file.stream().gcount()));
    const std::string format = binary_format_of(head);
    if (!format.empty()) {
      throw InputError("input '" + path + "' is " + format +
                       ", not text: loom prepare reads text files and JSON lines, either of them compressed by gzip or "
                       "zstd");
    }
    bytes += static_cast<int64_t>(std::filesystem::file_size(path, error));
  }
  return bytes;
}

// PREFIX.bin, .idx and .json are written over whatever has their names, so they must not be an
// input (`--input corpus.json --output corpus` would replace the user's text), nor a directory.
void check_outputs(const std::string& prefix, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  if (prefix.empty() || prefix.back() == '/' || fs::path(prefix).filename() == "." ||
      fs::path(prefix).filename() == "..") {
    throw InputError("--output must name a file prefix (PREFIX.bin, .idx and .json are written), got '" + prefix + "'");
  }
  for (const char* suffix : {".bin", ".idx", ".json"}) {
    const std::string path = prefix + suffix;
    std::error_code error;
    if (fs::is_directory(path, error)) throw InputError("--output: '" + path + "' is a directory");
    for (const auto& input : inputs) {
      if (fs::exists(path, error) && fs::equivalent(path, input, error) && !error) {
        throw InputError("--output " + prefix + " would write '" + path + "' over the input '" + input +
                         "': choose another prefix");
      }
    }
  }
  // Only a dataset is written over: a PREFIX.json that is no sidecar, or a PREFIX.bin or .idx
  // beside no Megatron-LM index, is someone's file (`--input train.jsonl --output train` would
  // replace a train.json corpus beside it).
  std::error_code error;
  if (fs::exists(sidecar_path(prefix), error) && !is_dataset_sidecar(prefix)) {
    throw InputError("--output " + prefix + " would write its sidecar over '" + sidecar_path(prefix) +
                     "', which is not one loom prepare wrote (your file?): choose another prefix");
  }
  if ((fs::exists(prefix + ".bin", error) || fs::exists(prefix + ".idx", error)) && !is_indexed_dataset(prefix)) {
    throw InputError("--output " + prefix + " would write over '" + prefix + ".bin' or '" + prefix +
                     ".idx', which are not a dataset (no Megatron-LM index beside them; your files?): choose "
                     "another prefix (a loom prepare stopped between its renames leaves a .bin alone: delete it "
                     "to prepare there again)");
  }
  // Its folder is made, as loom train makes its run directory (`--output data/corpus` in a fresh checkout).
  const fs::path folder = fs::path(prefix).parent_path();
  if (std::error_code error; !folder.empty() && !fs::is_directory(folder, error)) {
    fs::create_directories(folder, error);
    if (error) throw InputError("--output: cannot make the folder '" + folder.string() + "': " + error.message());
  }
}

// Tokenizes BATCH into IDS (same order) with WORKERS threads. The error of the first
// failing document (in input order) is rethrown, naming where the document came from.
void tokenize_batch(const Tokenizer& tokenizer, const std::vector<Document>& batch, int workers,
                    std::vector<std::vector<int64_t>>& ids) {
  ids.assign(batch.size(), {});
  std::vector<std::exception_ptr> errors(batch.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < batch.size(); i = next++) {
      try {
        ids[i] = tokenizer.encode(batch[i].text);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const int threads = std::max(1, std::min<int>(workers, static_cast<int>(batch.size())));
  if (threads == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& thread : pool) thread.join();
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const InputError& e) {
      throw InputError(batch[i].origin + ": " + e.what());
    }
  }
}

}  // namespace

int prepare(const PrepareArgs& args) {
  if (args.workers < 1) throw InputError("--workers must be at least 1 (got " + std::to_string(args.workers) + ")");
  const int64_t total_bytes = check_inputs(args.inputs);
  check_outputs(args.output_prefix, args.inputs);
  // One prepare per prefix at a time: two would share the temporary files and could publish one's
  // index beside the other's tokens.
  const auto output = std::filesystem::path(args.output_prefix);
  const DirectoryLock lock(output.has_parent_path() ? output.parent_path().string() : ".",
                           "prepare-" + output.filename().string(), "--output folder");
  const auto tokenizer = load_tokenizer(args.tokenizer);
  if (args.add_bos && tokenizer->bos_id() < 0)
    throw InputError("--add-bos: tokenizer '" + args.tokenizer + "' has no BOS token");
  if (args.append_eod && tokenizer->eos_id() < 0)
    throw InputError("--append-eod: tokenizer '" + args.tokenizer + "' has no EOS token");

  DatasetSidecar sidecar;
  sidecar.tokenizer = tokenizer->kind();
  // Absolute, with its CRC: `loom train` reads it from wherever it runs, and says when it is gone or changed.
  sidecar.tokenizer_source = tokenizer->source() == "byte" ? "byte" : tokenizer_path(tokenizer->source());
  if (sidecar.tokenizer != "byte") sidecar.tokenizer_crc32c = tokenizer_file_crc(sidecar.tokenizer_source);
  sidecar.vocab_size = tokenizer->vocab_size();
  sidecar.bos_id = tokenizer->bos_id();
  sidecar.eos_id = tokenizer->eos_id();
  sidecar.add_bos = args.add_bos;
  sidecar.append_eod = args.append_eod;
  // Megatron-LM's choice (megatron.core.datasets.indexed_dataset's optimal dtype: uint16 below 65500
  // ids), so that the files are byte for byte its tools' for every vocabulary.
  const bool narrow = tokenizer->vocab_size() < 65500;
  sidecar.dtype = narrow ? "uint16" : "int32";

  IndexedDatasetWriter writer(args.output_prefix, narrow ? TokenDtype::u16 : TokenDtype::i32);
  DocumentReader reader(args.inputs, args.split_paragraphs, args.json_key);
  ProgressBar progress(std::cerr, isatty(STDERR_FILENO) != 0, total_bytes);
  int64_t read = 0, skipped = 0;
  std::vector<Document> batch;
  std::vector<std::vector<int64_t>> ids;
  for (bool more = true; more;) {
    batch.clear();
    size_t batch_bytes = 0;
    Document doc;
    while (batch.size() < kBatchDocuments && batch_bytes < kBatchBytes && (more = reader.next(doc))) {
      batch_bytes += doc.text.size();
      batch.push_back(std::move(doc));
    }
    tokenize_batch(*tokenizer, batch, args.workers, ids);
    for (auto& document : ids) {
      ++read;
      // As Megatron-LM's preprocessing does, a document without tokens is left out, EOD or not.
      if (document.empty()) {
        ++skipped;
        continue;
      }
      if (args.add_bos) document.insert(document.begin(), tokenizer->bos_id());
      if (args.append_eod) document.push_back(tokenizer->eos_id());
      sidecar.max_token_id = std::max(sidecar.max_token_id, *std::max_element(document.begin(), document.end()));
      sidecar.tokens += static_cast<int64_t>(document.size());
      ++sidecar.documents;
      writer.add_document(document);
    }
    progress.update(read, reader.bytes_read());
  }
  if (sidecar.documents == 0) {  // an empty dataset trains nothing; the writer removes its temporaries
    throw InputError("--input: " + std::to_string(read) + " documents read, none with a token (" +
                     std::to_string(skipped) + " empty): there is nothing to write");
  }
  writer.finish();
  write_sidecar(args.output_prefix, sidecar);
  progress.finish(read, reader.bytes_read());
  std::cout << "wrote " << args.output_prefix << ".bin, .idx and .json: " << sidecar.documents << " documents, "
            << sidecar.tokens << " tokens (" << sidecar.tokenizer << " tokenizer, vocabulary " << sidecar.vocab_size
            << ", " << sidecar.dtype << ")";
  if (skipped > 0) std::cout << "; left out " << skipped << " empty documents";
  std::cout << std::endl;
  return 0;
}

}  // namespace loom::launch
