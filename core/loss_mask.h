// data.eod_mask_loss, Megatron-LM's --eod-mask-loss: a packed sample runs from one document into
// the next, and the target after an end-of-document token is the next document's first token,
// guessed from a context it has nothing to do with. Such targets are set to PyTorch's ignore_index
// (their loss is 0 and so is their gradient), and the loss becomes the mean over the targets left
// in the whole global batch: each micro-batch's mean over all its targets is multiplied by
// counted_target_factor, one number per step that every rank computes from the data alone (no
// collective), so that no layout, micro-batch size or cp split changes the loss.
#pragma once

#include <cstdint>

#include "core/batch_sampler.h"
#include "core/blended_sampler.h"
#include "core/config.h"

namespace loom {

constexpr int64_t kIgnoredTarget = -100;  // PyTorch's cross-entropy ignore_index

// The id data.eod_mask_loss masks after: data.eod_id when set, else the eos_id that the sidecars of
// every dataset of data.path and data.valid_path agree on; -1 when data.eod_mask_loss is off. An
// InputError naming the key and dataset when there is none to find: the synthetic corpus, a dataset
// without a sidecar (made by another tool), one prepared without --append-eod, or two that disagree.
int64_t resolve_eod_id(const Config& config);

// Every target whose input token is EOD_ID becomes kIgnoredTarget; nothing for EOD_ID < 0.
void mask_targets_after_eod(Batch& batch, int64_t eod_id);

// Over the samples at positions [FIRST, FIRST + COUNT): targets / targets left after masking (1 for
// EOD_ID < 0). 0 when none is left: such a step reports loss 0 and its language-model gradients are 0
// (the optimizer still steps: weight decay, Adam's moments, an MoE balance loss).
double counted_target_factor(const BlendedSampler& sampler, int64_t first, int64_t count, int64_t eod_id);

}  // namespace loom
