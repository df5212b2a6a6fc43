// The data a run trains on, kept in every checkpoint's manifest ("data"): a resume goes on at the
// checkpoint's count of consumed samples, which continues the run only in the same order over the
// same data. Another seed, order, split or blend (its weights, or its datasets in another order),
// or a dataset prepared again, would train some samples twice and skip others, with nothing said.
// A dataset is known by its files (dataset_fingerprint), not its path: the same files copied to a
// node's local disk, or reached through another mount, continue the run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/config.h"

namespace loom::launch {

// PREFIX.bin's and PREFIX.idx's sizes and the CRC-32C of the index's first and last MiB: cheap
// (no index is read whole), and different for another dataset or another tokenization of the same
// text.
std::string dataset_fingerprint(const std::string& prefix);

// A checksum of what PREFIX holds, for a resume to tell a dataset prepared again with the same
// sizes (the text in another case, one document's words changed for others of the same length)
// from the one it trained on, reading at most BUDGET bytes (data_record gives each dataset its
// share of 256 MiB): the index whole up to 64 MiB (and half the budget), and up to 64 blocks of 64
// KiB spread evenly over the tokens (over a larger index too), on rank 0 only. A rewrite of the
// text changes every block; a change inside one document of a larger file may fall between them.
std::string dataset_content_fingerprint(const std::string& prefix, int64_t budget = int64_t{256} << 20);

// {"path": [{"prefix": ABSOLUTE, "weight": W, "fingerprint": F, "content": C}, ...] (data.path's datasets in its
// order; empty: the built-in corpus), "split": data.split, "split_fractions": [TRAIN, VALID, TEST],
// "order": data.order, "seed": train.seed}.
nlohmann::json data_record(const Config& config);

// What would not continue, a clause per difference between the record of checkpoint MANIFEST and
// this run's (NOW), joined with "; "; empty when the order goes on, or when the checkpoint was saved
// before the data was recorded. The seed counts only when either is shuffled or draws the built-in
// corpus (which it generates); contents only where both records have them (not before 2026-12).
std::string data_change(const nlohmann::json& manifest, const nlohmann::json& now);

}  // namespace loom::launch
