#include "parallel/group_rows.h"

#include <limits>
#include <numeric>

namespace loom::parallel {

GroupRows::GroupRows(std::vector<int64_t> rows)
    : total_(std::accumulate(rows.begin(), rows.end(), int64_t{0})), host_(std::move(rows)) {}

GroupRows::GroupRows(torch::Tensor counts, int64_t total) : counts_(std::move(counts)), total_(total) {
  TORCH_CHECK(counts_.dim() == 1, "GroupRows: counts must be one-dimensional, got ", counts_.sizes());
}

int64_t GroupRows::groups() const {
  return host_ ? static_cast<int64_t>(host_->size()) : counts_.size(0);
}

const std::vector<int64_t>& GroupRows::host() const {
  if (!host_) {
    const auto on_cpu = counts_.to(torch::kCPU, torch::kInt64).contiguous();
    host_.emplace(on_cpu.data_ptr<int64_t>(), on_cpu.data_ptr<int64_t>() + on_cpu.numel());
  }
  return *host_;
}

torch::Tensor GroupRows::offsets(const torch::Device& device) const {
  TORCH_CHECK(total_ <= std::numeric_limits<int32_t>::max(), "GroupRows: ", total_,
              " rows overflow the grouped GEMM's int32 offsets");
  if (!host_ && counts_.device() == device) return counts_.cumsum(0).to(torch::kInt32);
  auto offs = torch::empty({groups()}, torch::kInt32);
  std::partial_sum(host().begin(), host().end(), offs.data_ptr<int32_t>());
  return offs.to(device);
}

torch::Tensor GroupRows::group_of_row(const torch::Device& device) const {
  const auto ids = torch::arange(groups(), torch::TensorOptions().dtype(torch::kInt64).device(device));
  // With the output's size given, repeat_interleave needs no read of the counts.
  const auto counts = host_ ? torch::tensor(*host_, torch::kInt64).to(device) : counts_.to(device);
  return torch::repeat_interleave(ids, counts, 0, total_);
}

}  // namespace loom::parallel
