// Megatron-LM's names for loom's config keys, so that a name typed by habit
// (`--set train_iters=5`, `seq_length:` in a YAML file) gets the key loom calls it.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct MegatronAlias {
  const char* megatron;  // the argument's name in Megatron-LM's arguments.py, with '_' for '-'
  const char* loom;      // loom's key; empty: not supported
  const char* note;      // what else to know: the value to set, or what is missing
};

// Every alias loom knows, by Megatron-LM's name.
const std::vector<MegatronAlias>& megatron_aliases();

// The hint for an unknown key NAME that is one of Megatron-LM's arguments, spelt with '_' or '-',
// with or without a section in front (train.train_iters, --train-iters): "did you mean
// 'train.steps'? (Megatron-LM's --train-iters)", or what loom does not support yet.
// Empty when NAME is none of them.
std::string megatron_hint(const std::string& name);

}  // namespace loom
