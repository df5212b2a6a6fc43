// The config keys that name one of a few choices, as enums: parsed once when the
// config is read (a bad value is an InputError naming the key and the valid
// values), compared as types below that, printed back by to_string.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "core/errors.h"

namespace loom {

enum class TrainPrecision { fp32, bf16, fp16 };                          // train.precision
enum class Recompute { none, full, selective };                          // train.recompute
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved, zb_h1 };  // parallel.schedule
enum class TrainDevice { automatic, cpu, cuda };                         // train.device
enum class DataOrder { sequential, shuffled };                           // data.order
enum class GradReduceDtype { fp32, bf16 };                               // parallel.grad_reduce_dtype
enum class CommBackend { automatic, gloo, nccl };                        // parallel.backend
enum class DpCollectives { flat, hierarchical };                         // parallel.dp_collectives
enum class GradCompression { none, bf16, int8, powersgd };               // parallel.grad_compression
enum class ContextComm { p2p, a2a };                                     // parallel.cp_comm
enum class ModelArch { gpt2, llama };                                    // model.arch
enum class NormKind { layernorm, rmsnorm };                              // model.norm
enum class Activation { gelu, swiglu };                                  // model.activation
enum class PositionKind { learned, rope };                               // model.position
enum class RopeScalingKind { none, llama3, yarn };                       // model.rope_scaling.type
enum class LrDecayStyle { cosine, linear, constant, wsd };               // train.lr_decay_style
enum class OptimizerKind { adamw, muon };                                // train.optimizer

// Each enum's key and its values' names, in the order of the enumerators.
template <typename E>
struct ConfigEnum;

#define LOOM_CONFIG_ENUM(E, KEY, ...)                  \
  template <>                                          \
  struct ConfigEnum<E> {                               \
    static constexpr const char* key = KEY;            \
    static constexpr std::array names = {__VA_ARGS__}; \
  };

LOOM_CONFIG_ENUM(TrainPrecision, "train.precision", "fp32", "bf16", "fp16")
LOOM_CONFIG_ENUM(Recompute, "train.recompute", "none", "full", "selective")
LOOM_CONFIG_ENUM(PipelineSchedule, "parallel.schedule", "gpipe", "1f1b", "interleaved", "zb-h1")
LOOM_CONFIG_ENUM(TrainDevice, "train.device", "auto", "cpu", "cuda")
LOOM_CONFIG_ENUM(DataOrder, "data.order", "sequential", "shuffled")
LOOM_CONFIG_ENUM(GradReduceDtype, "parallel.grad_reduce_dtype", "fp32", "bf16")
LOOM_CONFIG_ENUM(CommBackend, "parallel.backend", "auto", "gloo", "nccl")
LOOM_CONFIG_ENUM(DpCollectives, "parallel.dp_collectives", "flat", "hierarchical")
LOOM_CONFIG_ENUM(GradCompression, "parallel.grad_compression", "none", "bf16", "int8", "powersgd")
LOOM_CONFIG_ENUM(ContextComm, "parallel.cp_comm", "p2p", "a2a")
LOOM_CONFIG_ENUM(ModelArch, "model.arch", "gpt2", "llama")
LOOM_CONFIG_ENUM(NormKind, "model.norm", "layernorm", "rmsnorm")
LOOM_CONFIG_ENUM(Activation, "model.activation", "gelu", "swiglu")
LOOM_CONFIG_ENUM(PositionKind, "model.position", "learned", "rope")
LOOM_CONFIG_ENUM(RopeScalingKind, "model.rope_scaling.type", "none", "llama3", "yarn")
LOOM_CONFIG_ENUM(LrDecayStyle, "train.lr_decay_style", "cosine", "linear", "constant", "wsd")
LOOM_CONFIG_ENUM(OptimizerKind, "train.optimizer", "adamw", "muon")

#undef LOOM_CONFIG_ENUM

template <typename E>
std::string to_string(E value) {
  return ConfigEnum<E>::names[static_cast<size_t>(value)];
}

// The valid values as a sentence: "fp32, bf16 or fp16".
template <typename E>
std::string valid_values() {
  const auto& names = ConfigEnum<E>::names;
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += names[i];
    if (i + 2 < names.size()) text += ", ";
    if (i + 2 == names.size()) text += " or ";
  }
  return text;
}

// TEXT as an E; throws InputError "config key 'KEY': must be A, B or C, got 'TEXT'".
template <typename E>
E from_string(const std::string& text) {
  const auto& names = ConfigEnum<E>::names;
  for (size_t i = 0; i < names.size(); ++i) {
    if (text == names[i]) return static_cast<E>(i);
  }
  throw InputError(std::string("config key '") + ConfigEnum<E>::key + "': must be " + valid_values<E>() + ", got '" +
                   text + "'");
}

}  // namespace loom
