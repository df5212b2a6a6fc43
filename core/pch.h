// Precompiled header: the LibTorch and c10d headers that nearly every file pulls in.
#pragma once
#include <fmt/format.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
