#include "core/loss_mask.h"

#include <algorithm>
#include <string>

#include "core/data_blend.h"
#include "core/dataset_sidecar.h"
#include "core/errors.h"

namespace loom {

int64_t resolve_eod_id(const Config& config) {
  const auto& d = config.data;
  if (!d.eod_mask_loss) return -1;
  if (d.eod_id >= 0) return d.eod_id;
  const std::string ask = "set data.eod_id to the id that ends each document";
  int64_t eod = -1;
  std::string eod_prefix;
  for (const auto& [spec, key] : {std::pair{d.path, "data.path"}, std::pair{d.valid_path, "data.valid_path"}}) {
    auto blend = parse_blend(spec, key);
    if (blend.empty() && spec == d.path) blend.push_back({1.0, ""});
    for (const auto& component : blend) {
      const std::string& prefix = component.prefix;
      if (prefix.empty()) {
        throw InputError(std::string("data.eod_mask_loss: the built-in synthetic corpus (") + key +
                         " is empty) has no documents to end; give data.path, or " + ask);
      }
      const auto sidecar = read_sidecar(prefix);
      if (!sidecar) {
        throw InputError("data.eod_mask_loss: " + std::string(key) + " '" + prefix + "' has no sidecar " +
                         sidecar_path(prefix) +
                         " (it was not made by loom prepare) to say which id ends a document: " + ask);
      }
      if (sidecar->eos_id < 0) {
        throw InputError("data.eod_mask_loss: " + std::string(key) + " '" + prefix + "' was tokenized by " +
                         sidecar->tokenizer + ", which has no end-of-document (EOS) token (says " +
                         sidecar_path(prefix) + "): " + ask);
      }
      if (sidecar->append_eod == false) {
        throw InputError("data.eod_mask_loss: " + std::string(key) + " '" + prefix +
                         "' was prepared without --append-eod (says " + sidecar_path(prefix) +
                         "): no end-of-document token separates its documents, so nothing would be masked. Prepare "
                         "it again with loom prepare --append-eod, or " +
                         ask);
      }
      if (eod >= 0 && sidecar->eos_id != eod) {
        throw InputError("data.eod_mask_loss: " + std::string(key) + " '" + prefix + "' ends its documents with id " +
                         std::to_string(sidecar->eos_id) + ", '" + eod_prefix + "' with " + std::to_string(eod) +
                         " (their sidecars): one id cannot mask both; prepare them with one tokenizer");
      }
      if (sidecar->eos_id >= config.model.vocab_size) {
        throw InputError("data.eod_mask_loss: " + std::string(key) + " '" + prefix + "' ends its documents with id " +
                         std::to_string(sidecar->eos_id) + " (says " + sidecar_path(prefix) +
                         "), outside model.vocab_size = " + std::to_string(config.model.vocab_size));
      }
      eod = sidecar->eos_id;
      eod_prefix = prefix;
    }
  }
  return eod;
}

void mask_targets_after_eod(Batch& batch, int64_t eod_id) {
  if (eod_id < 0) return;
  // Not in place: the tokens and targets of a one-sample batch are views of one window (a [1, S]
  // narrow is already contiguous), and -100 written into the targets would land in the next token.
  batch.targets = batch.targets.masked_fill(batch.tokens == eod_id, kIgnoredTarget);
}

double counted_target_factor(const BlendedSampler& sampler, int64_t first, int64_t count, int64_t eod_id) {
  if (eod_id < 0) return 1.0;
  // A few samples at a time: a global batch of 1024 x 8k tokens would be 64 MiB at once.
  constexpr int64_t kChunk = 32;
  int64_t masked = 0, targets = 0;
  for (int64_t start = first; start < first + count; start += kChunk) {
    const Batch part = sampler.batch(start, std::min(kChunk, first + count - start));
    masked += (part.tokens == eod_id).sum().item<int64_t>();
    targets += part.tokens.numel();
  }
  return masked == targets ? 0.0 : static_cast<double>(targets) / static_cast<double>(targets - masked);
}

}  // namespace loom
