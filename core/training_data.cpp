#include "core/training_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/data_blend.h"
#include "core/dataset_sidecar.h"
#include "core/errors.h"
#include "core/indexed_dataset.h"
#include "core/logging.h"
#include "core/loss_mask.h"

namespace loom {
namespace {

// A dataset of this size or less without a sidecar is scanned for its largest id before step 1
// (about a second per GiB); larger ones are checked batch by batch as they are read.
constexpr size_t kScanLimitBytes = size_t{2} << 30;

std::unique_ptr<TokenCorpus> open_component(const BlendComponent& component, const std::string& key,
                                            const Config& config) {
  if (component.prefix.empty()) {
    return std::make_unique<SyntheticCorpus>(config.model.vocab_size, int64_t{1} << 20,
                                             static_cast<uint64_t>(config.train.seed));
  }
  try {
    return std::make_unique<IndexedCorpus>(component.prefix, key);
  } catch (const InputError& e) {
    throw InputError("config key '" + key + "': " + e.what());
  }
}

std::vector<BlendComponent> components_of(const std::string& spec, const std::string& key) {
  auto blend = parse_blend(spec, key);
  if (blend.empty()) blend.push_back({1.0, ""});  // the built-in synthetic corpus
  return blend;
}

// A sidecar describes the dataset it was written with: one that names other counts or another
// dtype than PREFIX.idx is stale (the dataset replaced, or a prepare stopped between its renames),
// and its max_token_id would let ids the model cannot embed through unchecked.
// (The index's header and the .bin's size: no index is read whole, whatever its size.)
void check_sidecar_matches(const std::string& prefix, const std::string& key, const DatasetSidecar& sidecar) {
  const IndexHeader header = read_index_header(prefix);
  std::error_code error;
  const auto bin_bytes = std::filesystem::file_size(prefix + ".bin", error);
  const int64_t tokens = error ? -1 : static_cast<int64_t>(bin_bytes / dtype_size(header.dtype));
  const std::string dtype = header.dtype == TokenDtype::u16 ? "uint16" : header.dtype == TokenDtype::i32 ? "int32" : "";
  const bool counts_differ = (sidecar.documents > 0 && sidecar.documents != static_cast<int64_t>(header.sequences)) ||
                             (sidecar.tokens > 0 && sidecar.tokens != tokens);
  const bool dtype_differs = !sidecar.dtype.empty() && sidecar.dtype != dtype;
  if (!counts_differ && !dtype_differs) return;
  throw InputError(fmt::format(
      "{} '{}': its sidecar {} describes {} documents, {} tokens ({}), but {}.idx holds {} documents, {} tokens ({}): "
      "the sidecar is stale (the dataset replaced, or a loom prepare stopped before it finished). Prepare the "
      "dataset again, or remove {} to have its ids scanned",
      key, prefix, sidecar_path(prefix), sidecar.documents, sidecar.tokens, sidecar.dtype, prefix, header.sequences,
      tokens, dtype.empty() ? "another dtype" : dtype, sidecar_path(prefix)));
}

void check_vocabulary(const std::string& prefix, const std::string& key, int64_t vocab_size) {
  if (prefix.empty()) return;
  if (const auto sidecar = read_sidecar(prefix)) {
    check_sidecar_matches(prefix, key, *sidecar);
    // The largest id written decides (the byte tokenizer's vocabulary of 257 holds 256 only with --append-eod);
    // a sidecar without it is judged by the tokenizer's vocabulary.
    if (sidecar->max_token_id >= vocab_size) {
      throw InputError(key + " '" + prefix + "' holds token id " + std::to_string(sidecar->max_token_id) + " (" +
                       sidecar->tokenizer + ", says " + sidecar_path(prefix) + "), outside model.vocab_size = " +
                       std::to_string(vocab_size) + ": set model.vocab_size to at least " +
                       std::to_string(static_cast<uint64_t>(sidecar->max_token_id) + 1));
    }
    if (sidecar->max_token_id < 0 && sidecar->vocab_size > vocab_size) {
      throw InputError(key + " '" + prefix + "' was tokenized with a vocabulary of " +
                       std::to_string(sidecar->vocab_size) + " (" + sidecar->tokenizer + ", says " +
                       sidecar_path(prefix) + "), more than model.vocab_size = " + std::to_string(vocab_size) +
                       ": set model.vocab_size to at least " + std::to_string(sidecar->vocab_size));
    }
    return;
  }
  IndexedDataset dataset(prefix);
  if (dataset.bin_bytes() > kScanLimitBytes) {
    warn0(
        "{} '{}' has no sidecar {} and is too large to scan before training: its token ids are checked as "
        "they are read",
        key, prefix, sidecar_path(prefix));
    return;
  }
  const auto [low, high] = dataset.token_id_range();
  if (low < 0) {
    throw InputError(key + " '" + prefix + "' holds token id " + std::to_string(low) +
                     ", which no embedding row has (a padding value written by the tool that made it?)");
  }
  if (high >= vocab_size) {
    throw InputError(key + " '" + prefix + "' holds token id " + std::to_string(high) +
                     ", outside model.vocab_size = " + std::to_string(vocab_size) +
                     ": set model.vocab_size to at least " + std::to_string(high + 1));
  }
}

// An evaluation reads eval.steps global batches; a validation set smaller than that is read
// more than once per evaluation. The loss is still a mean over real samples, but not over as
// many distinct ones as asked for: said once, with the eval.steps that would not repeat.
void warn_small_validation_set(const BlendedSampler& valid, const Config& config) {
  int64_t samples = 0;
  for (size_t d = 0; d < valid.num_datasets(); ++d) samples += valid.dataset(d).num_samples();
  const int64_t batch = config.train.global_batch_size;
  if (config.eval.steps <= samples / batch) return;  // no product: eval.steps may be huge
  const std::string fix = samples >= batch
                              ? "eval.steps = " + std::to_string(samples / batch) + " reads each at most once"
                              : "not one global batch of distinct samples is there";
  warn0(
      "the validation data holds {} samples of model.seq_len tokens, fewer than an evaluation reads (eval.steps = {} "
      "x train.global_batch_size = {}): each evaluation reads samples more than once; {}",
      samples, config.eval.steps, batch, fix);
}

}  // namespace

TrainingData::TrainingData(const Config& config) : eod_id_(resolve_eod_id(config)) {
  const auto& m = config.model;
  const auto& d = config.data;
  const auto seed = static_cast<uint64_t>(config.train.seed);
  const auto train_blend = components_of(d.path, "data.path");
  const DataSplit split = d.split.empty() ? DataSplit{} : parse_split(d.split, "data.split");
  std::vector<std::unique_ptr<BatchSampler>> train_samplers, valid_samplers;
  std::vector<double> weights;
  for (size_t i = 0; i < train_blend.size(); ++i) {
    corpora_.push_back(open_component(train_blend[i], "data.path", config));
    const TokenCorpus* whole = corpora_.back().get();
    const TokenCorpus* train_part = whole;
    if (split.train < 1.0 ||
        split.valid > 0.0) {  // (a tiny valid weight rounds train to 1: still cut, and refused empty)
      // Cut at document starts, as Megatron-LM does, so that no document is in two parts.
      const int64_t n = whole->num_tokens();
      const int64_t train_end = whole->document_boundary(static_cast<int64_t>(std::llround(split.train * n)));
      const int64_t valid_end = std::max(
          train_end, whole->document_boundary(static_cast<int64_t>(std::llround((split.train + split.valid) * n))));
      corpora_.push_back(std::make_unique<SliceCorpus>(*whole, 0, train_end, "training"));
      train_part = corpora_.back().get();
      if (split.valid > 0.0) {
        if (valid_end == train_end) {  // no document starts inside the validation share
          throw InputError("data.split '" + d.split + "' leaves " + whole->describe() +
                           " no validation document: the parts are cut at document starts, as Megatron-LM cuts them, "
                           "and no document starts between tokens " +
                           std::to_string(std::llround(split.train * n)) + " and " + std::to_string(train_end) +
                           " of " + std::to_string(n) +
                           ". Prepare it with more, shorter documents (loom prepare --split-paragraphs, or a "
                           "JSON line each), or give data.valid_path");
        }
        corpora_.push_back(std::make_unique<SliceCorpus>(*whole, train_end, valid_end - train_end, "validation"));
        valid_samplers.push_back(
            std::make_unique<BatchSampler>(*corpora_.back(), m.seq_len, m.vocab_size, false, seed + i));
      }
    }
    // Each dataset of a blend shuffles with its own seed; a single dataset keeps train.seed.
    train_samplers.push_back(
        std::make_unique<BatchSampler>(*train_part, m.seq_len, m.vocab_size, d.order == DataOrder::shuffled, seed + i));
    weights.push_back(train_blend[i].weight);
  }
  train_ = std::make_unique<BlendedSampler>(std::move(train_samplers), weights);
  if (!d.valid_path.empty()) {
    weights.clear();
    for (const auto& component : parse_blend(d.valid_path, "data.valid_path")) {
      corpora_.push_back(open_component(component, "data.valid_path", config));
      valid_samplers.push_back(std::make_unique<BatchSampler>(*corpora_.back(), m.seq_len, m.vocab_size, false, seed));
      weights.push_back(component.weight);
    }
  }
  if (!valid_samplers.empty()) {
    valid_ = std::make_unique<BlendedSampler>(std::move(valid_samplers), weights);
    warn_small_validation_set(*valid_, config);
  }
}

void check_data(const Config& config) {
  const auto& d = config.data;
  if (!d.split.empty()) parse_split(d.split, "data.split");
  // The tokenizer of the first dataset whose sidecar names one: every other must name the same, or
  // the run would learn one id as two tokens (a blend), or validate on ids of another meaning.
  std::string first_prefix, first_tokenizer;
  std::optional<DatasetSidecar> first;
  for (const auto& [spec, key] : {std::pair{d.path, "data.path"}, std::pair{d.valid_path, "data.valid_path"}}) {
    for (const auto& component : parse_blend(spec, key)) {
      open_component(component, key, config);
      check_vocabulary(component.prefix, key, config.model.vocab_size);
      const auto sidecar = component.prefix.empty() ? std::nullopt : read_sidecar(component.prefix);
      if (sidecar && d.eod_mask_loss && d.eod_id >= 0 && sidecar->eos_id >= 0 && sidecar->eos_id != d.eod_id) {
        warn0("data.eod_id = {} masks after another id than {} '{}' ends its documents with ({}, says {})", d.eod_id,
              key, component.prefix, sidecar->eos_id, sidecar_path(component.prefix));
      }
      if (!sidecar || sidecar->tokenizer.empty()) continue;
      const std::string tokenizer =
          fmt::format("{} tokenizer of vocabulary {}", sidecar->tokenizer, sidecar->vocab_size) +
          (sidecar->tokenizer == "byte" ? "" : " ('" + sidecar->tokenizer_source + "')");
      if (!first) {
        first = sidecar;
        first_prefix = component.prefix;
        first_tokenizer = tokenizer;
      } else if (sidecar->tokenizer != first->tokenizer || sidecar->vocab_size != first->vocab_size ||
                 (sidecar->tokenizer_crc32c && first->tokenizer_crc32c &&
                  *sidecar->tokenizer_crc32c != *first->tokenizer_crc32c)) {
        // (The same kind and size, another file: two SentencePiece models of one vocabulary size.)
        const bool same_words = sidecar->tokenizer == first->tokenizer && sidecar->vocab_size == first->vocab_size;
        throw InputError(fmt::format(
            "{} '{}' was made with the {} (says {}), but '{}' with the {}{}: one run's datasets share a tokenizer, "
            "or the same id means different text in each",
            key, component.prefix, tokenizer, sidecar_path(component.prefix), first_prefix, first_tokenizer,
            same_words ? " (another file: their tokenizer_crc32c differ)" : ""));
      } else if (sidecar->add_bos && first->add_bos && *sidecar->add_bos != *first->add_bos) {
        warn0(
            "{} '{}' has documents {} BOS and '{}' {} (loom prepare --add-bos): the checkpoints record the first's, "
            "which `loom generate` and `loom export` start prompts by",
            key, component.prefix, *sidecar->add_bos ? "starting with" : "without", first_prefix,
            *first->add_bos ? "starting with it" : "without it");
      }
    }
  }
  resolve_eod_id(config);  // data.eod_mask_loss finds its id, or says why not
}

}  // namespace loom
