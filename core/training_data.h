// The data a config asks for: the training order over data.path (one dataset
// or a blend), and the validation data from data.valid_path or from the
// validation part of data.split.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/blended_sampler.h"
#include "core/config.h"
#include "core/token_corpus.h"

namespace loom {

class TrainingData {
 public:
  explicit TrainingData(const Config& config);

  const BlendedSampler& train() const { return *train_; }
  // Null when the config gives no validation data.
  const BlendedSampler* valid() const { return valid_.get(); }
  // The training datasets, in the order of data.path, for the epoch log.
  std::string describe(size_t dataset) const { return train_->dataset(dataset).corpus().describe(); }
  // The token after which data.eod_mask_loss leaves targets out of the loss; -1: off (core/loss_mask.h).
  int64_t eod_id() const { return eod_id_; }

 private:
  std::vector<std::unique_ptr<TokenCorpus>> corpora_;  // every corpus, whole ones before their slices
  std::unique_ptr<BlendedSampler> train_, valid_;
  int64_t eod_id_ = -1;
};

// What can be checked of the data before the job's ranks meet: the blends and split parse, every
// dataset opens, and no dataset holds (by its PREFIX.json sidecar, or a scan of a small enough
// PREFIX.bin) a token id the model's vocabulary cannot embed. An InputError names the key and file.
void check_data(const Config& config);

}  // namespace loom
