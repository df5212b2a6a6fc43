// The gradient synchronisation's options (parallel/gradient_sync.h) from a run's config: ZeRO
// stage, buckets, wire dtype, mixed precision, MoE, split backward and compression.
#pragma once

#include "core/config.h"
#include "core/precision.h"
#include "parallel/gradient_sync.h"

namespace loom::launch {

parallel::GradientSyncOptions gradient_sync_options(const Config& config, const Precision& precision);

}  // namespace loom::launch
