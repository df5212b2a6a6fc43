// The data a run trains on, kept in every checkpoint's manifest ("data"): a resume goes on at the
// checkpoint's count of consumed samples, which continues the run only in the same order over the
// same data. Another seed, order, split or blend (its weights, or its datasets in another order),
// or a dataset prepared again, would train some samples twice and skip others, with nothing said.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"

namespace loom::launch {

// {"path": [{"prefix": ABSOLUTE, "weight": W, "sequences": N, "bin_bytes": N}, ...] (data.path's
// datasets in its order; empty: the built-in corpus), "split": data.split, "order": data.order,
// "seed": train.seed}.
nlohmann::json data_record(const Config& config);

// What would not continue: a sentence for each difference between the record a checkpoint SAVED
// and this run's (NOW); empty when the order goes on. The seed counts only when either is shuffled.
std::vector<std::string> data_record_differences(const nlohmann::json& saved, const nlohmann::json& now);

// A resume from checkpoint MANIFEST (SOURCE names it) over this run's data NOW: an InputError saying
// what changed unless ALLOW_DATA_CHANGE (--allow-data-change), which warns instead. Nothing for a
// checkpoint saved before the data was recorded.
void require_data_continues(const nlohmann::json& manifest, const nlohmann::json& now, const std::string& source,
                            bool allow_data_change);

}  // namespace loom::launch
