// How many rows each group holds, for products over rows sorted by group (the experts' grouped
// GEMM, the dispatcher's splits). On the device as counts, and on the host only when asked: a GPU
// step whose products take their offsets on the device never waits for the routing to come back
// to the host (one wait per MoE layer and micro-batch, which left the GPU idle ~17% of the step).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace loom::parallel {

class GroupRows {
 public:
  GroupRows() = default;
  // Known on the host (implicit: a list of row counts is one).
  GroupRows(std::vector<int64_t> rows);  // NOLINT(google-explicit-constructor)
  // COUNTS: int64 [G] on any device, summing to TOTAL (the rows' tensor knows it without a read).
  GroupRows(torch::Tensor counts, int64_t total);

  int64_t groups() const;
  int64_t total() const { return total_; }
  bool on_host() const { return host_.has_value(); }
  // The counts on the host, read from the device once (a synchronisation on a GPU).
  const std::vector<int64_t>& host() const;
  // int32 [G]: the end of each group's rows, on DEVICE (ATen's _grouped_mm's offsets).
  torch::Tensor offsets(const torch::Device& device) const;
  // int64 [total]: the group of each row, on DEVICE.
  torch::Tensor group_of_row(const torch::Device& device) const;

 private:
  torch::Tensor counts_;  // undefined when built from the host
  int64_t total_ = 0;
  mutable std::optional<std::vector<int64_t>> host_;
};

}  // namespace loom::parallel
