// How data.path, data.valid_path and data.split are written: one dataset
// PREFIX, or Megatron-LM's blend "W1 PREFIX1 W2 PREFIX2 ..." (weights need
// not sum to 1), and a split "969,30,1" of each training dataset into
// training, validation and test parts.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct BlendComponent {
  double weight = 1.0;  // normalised: the weights of a blend sum to 1
  std::string prefix;
};

// KEY names the config key in errors. An empty SPEC gives no components.
std::vector<BlendComponent> parse_blend(const std::string& spec, const std::string& key);

// The fractions of a split: train + valid + test = 1.
struct DataSplit {
  double train = 1.0;
  double valid = 0.0;
  double test = 0.0;
};

// "969,30,1", "98,2" (test 0) or "1" (all training); KEY names the config key in errors.
DataSplit parse_split(const std::string& spec, const std::string& key);

}  // namespace loom
