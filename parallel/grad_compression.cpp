#include "parallel/grad_compression.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <memory>

#include "core/crc32c.h"

namespace loom::parallel {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// PowerSGD compresses what has two or more dimensions, seen as its first by the rest.
bool is_matrix(const BucketSlot& slot) {
  return slot.shape.size() >= 2 && slot.shape.front() > 1 && numel_of(slot.shape) / slot.shape.front() > 1;
}

// A handle the returned function can own (the function must be copyable).
std::shared_ptr<CommHandle> shared(CommHandle handle) {
  return std::make_shared<CommHandle>(std::move(handle));
}

// The columns of M (n x r) made orthonormal, in place: Gram-Schmidt up to rank 2, Householder QR
// beyond, which keeps them orthonormal however ill-conditioned M is (gradients often are), where
// Gram-Schmidt loses that beyond a couple of columns (PyTorch's hook makes the same choice).
void orthonormalize(torch::Tensor& m) {
  if (m.size(1) <= 2) {
    orthogonalize_columns(m);
  } else {
    m.copy_(std::get<0>(torch::linalg_qr(m, "reduced")));
  }
}

}  // namespace

uint64_t parameter_key(const torch::Tensor& parameter) {
  torch::NoGradGuard no_grad;
  const auto flat = parameter.detach().reshape({-1});
  const int64_t n = flat.numel(), ends = std::min<int64_t>(32, n);
  // One small host read, once per parameter when the buckets are made.
  const auto values =
      torch::cat({flat.narrow(0, 0, ends), flat.narrow(0, n - ends, ends)}).to(torch::kCPU, torch::kDouble);
  const auto shape = parameter.sizes().vec();
  const uint32_t low = crc32c(shape.data(), shape.size() * sizeof(int64_t));
  const uint32_t high = crc32c(values.data_ptr<double>(), static_cast<size_t>(values.numel()) * sizeof(double), low);
  return (static_cast<uint64_t>(high) << 32) | low;
}

torch::Tensor pack_tensors(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> parts;
  for (const auto& t : tensors) {
    auto data = t.detach().to(torch::kCPU).contiguous().view({-1});
    auto head = torch::tensor({static_cast<int64_t>(data.scalar_type()), data.numel()}, torch::kLong);
    parts.push_back(head.view(torch::kByte));
    if (data.numel() > 0) parts.push_back(data.view(torch::kByte));
  }
  return parts.empty() ? torch::zeros({0}, torch::kByte) : torch::cat(parts);
}

std::vector<torch::Tensor> unpack_tensors(const torch::Tensor& bytes) {
  std::vector<torch::Tensor> out;
  auto all = bytes.contiguous();
  int64_t at = 0;
  while (at < all.numel()) {
    TORCH_CHECK(at + 16 <= all.numel(), "compression state: truncated");
    auto head = all.narrow(0, at, 16).clone().view(torch::kLong);
    const auto dtype = static_cast<torch::ScalarType>(head[0].item<int64_t>());
    const int64_t numel = head[1].item<int64_t>();
    at += 16;
    const int64_t size = numel * static_cast<int64_t>(c10::elementSize(dtype));
    TORCH_CHECK(numel >= 0 && at + size <= all.numel(), "compression state: truncated");
    out.push_back(size == 0 ? torch::zeros({0}, torch::TensorOptions().dtype(dtype))
                            : all.narrow(0, at, size).clone().view(dtype));
    at += size;
  }
  return out;
}

std::pair<torch::Tensor, torch::Tensor> quantize_int8(const torch::Tensor& x, int64_t block) {
  auto blocks = x.view({-1, block});
  auto scales = blocks.abs().amax(1) / 127.0;
  // An all-zero block keeps scale 0 and codes 0: dividing by one instead leaves them 0.
  auto safe = torch::where(scales > 0, scales, torch::ones_like(scales));
  auto codes = torch::round(blocks / safe.unsqueeze(1)).clamp_(-127, 127).to(torch::kChar);
  return {codes.view({-1}), scales.contiguous()};
}

torch::Tensor dequantize_int8(const torch::Tensor& codes, const torch::Tensor& scales, int64_t block) {
  return (codes.view({-1, block}).to(torch::kFloat) * scales.unsqueeze(1)).view({-1});
}

void orthogonalize_columns(torch::Tensor& m) {
  const int64_t columns = m.size(1);
  for (int64_t i = 0; i < columns; ++i) {
    auto column = m.narrow(1, i, 1);
    // The epsilon keeps a vanishing gradient's column from dividing by zero (as PyTorch's hook).
    column.div_(column.norm() + 1e-8);
    if (i + 1 < columns) {
      auto rest = m.narrow(1, i + 1, columns - i - 1);
      rest.sub_((column * rest).sum(0, /*keepdim=*/true) * column);
    }
  }
}

BucketCompressor::BucketCompressor(const GradCompressionOptions& options, std::vector<BucketSlot> slots,
                                   int64_t average_over)
    : options_(options), slots_(std::move(slots)), average_over_(average_over) {
  if (options_.kind != GradCompression::powersgd) return;
  // The first Q, alike on every rank of the group (P = M Q is summed over it) and on every copy of
  // the parameter elsewhere (the tied embedding on the first and last stages: seeded by its key).
  for (const auto& slot : slots_) {
    if (!is_matrix(slot)) {
      q_.emplace_back();
      continue;
    }
    const int64_t n = slot.shape.front(), m = numel_of(slot.shape) / n;
    const int64_t rank = std::min({options_.powersgd_rank, n, m});
    auto generator = at::detail::createCPUGenerator(options_.seed ^ slot.key);
    q_.push_back(at::normal(0.0, 1.0, {m, rank}, generator));
  }
}

void BucketCompressor::redraw_zero_columns(torch::Tensor& q, size_t slot) const {
  // Seeded by the options' seed, the matrix's key and the reduction: the same on every rank and copy.
  auto generator = at::detail::createCPUGenerator((options_.seed ^ slots_[slot].key) +
                                                  104729ULL * static_cast<uint64_t>(reductions_));
  const auto fresh = at::normal(0.0, 1.0, q.sizes(), generator).to(q.device(), q.scalar_type());
  q = torch::where(q.abs().sum(0) == 0, fresh, q);
}

void BucketCompressor::end_step(bool applied) {
  const auto error = std::move(pending_error_);  // (leaves it undefined)
  const auto new_q = std::move(pending_q_);
  pending_q_.clear();
  if (!applied) return;
  if (error.defined()) error_ = error;
  // A column of Q that is zero (a step whose summed gradient was zero: an expert no rank routed
  // to) would stay zero, and P = M Q with it: the matrix would send nothing in that direction
  // again (PyTorch's hook keeps it so). Drawn again, alike on every rank (one host read a bucket).
  torch::Tensor zero_column;
  for (size_t k = 0; k < new_q.size(); ++k) {
    if (!new_q[k].defined()) continue;
    q_[k] = new_q[k];
    const auto zero = (q_[k].abs().sum(0) == 0).any();
    zero_column = zero_column.defined() ? zero_column | zero : zero;
  }
  if (!zero_column.defined() || !zero_column.item<bool>()) return;
  for (size_t k = 0; k < q_.size(); ++k) {
    if (q_[k].defined()) redraw_zero_columns(q_[k], k);
  }
}

std::function<void()> BucketCompressor::start(const torch::Tensor& buffer, Communicator& group) {
  torch::NoGradGuard no_grad;
  // State made or restored on the CPU (the first Q, a checkpoint's) joins the gradients' device.
  if (error_.defined() && error_.device() != buffer.device()) error_ = error_.to(buffer.device());
  for (auto& q : q_) {
    if (q.defined() && q.device() != buffer.device()) q = q.to(buffer.device());
  }
  ++reductions_;
  if (group.size() == 1) return [] {};
  switch (options_.kind) {
    case GradCompression::bf16: return start_bf16(buffer, group);
    case GradCompression::int8: return start_int8(buffer, group);
    case GradCompression::powersgd:
      if (reductions_ > options_.powersgd_start_step) return start_powersgd(buffer, group);
      break;
    case GradCompression::none: break;
  }
  auto handle = shared(group.all_reduce(buffer));
  return [handle] { handle->wait(); };
}

std::function<void()> BucketCompressor::start_bf16(const torch::Tensor& buffer, Communicator& group) {
  const int64_t n = buffer.numel(), ranks = group.size(), chunk = (n + ranks - 1) / ranks;
  auto input = torch::zeros({chunk * ranks}, buffer.options());
  input.narrow(0, 0, n).copy_(buffer.view({-1}));
  if (options_.error_feedback && error_.defined()) input.narrow(0, 0, n).add_(error_);
  auto wire = input.to(torch::kBFloat16);
  torch::Tensor error;
  if (options_.error_feedback) error = (input - wire.to(input.scalar_type())).narrow(0, 0, n).clone();
  // Chunk r of every rank to rank r, summed there in fp32 (a bf16 ring would round every partial
  // sum), rounded once more and gathered: the ring all-reduce's bytes, in bf16.
  const std::vector<int64_t> splits(static_cast<size_t>(ranks), chunk);
  auto theirs = torch::empty_like(wire);
  auto moved = shared(group.all_to_all(theirs, wire, splits, splits));
  return [=, &group]() mutable {
    moved->wait();
    torch::NoGradGuard no_grad;
    auto mine = theirs.to(torch::kFloat).view({ranks, chunk}).sum(0).to(torch::kBFloat16);
    auto all = torch::empty_like(wire);
    group.all_gather(all, mine).wait();
    buffer.view({-1}).copy_(all.narrow(0, 0, n));
    pending_error_ = error;
  };
}

int64_t BucketCompressor::int8_layout_numel() const {
  const int64_t block = options_.int8_block;
  int64_t total = 0;
  for (const auto& slot : slots_) total += (numel_of(slot.shape) + block - 1) / block * block;
  return total;
}

std::function<void()> BucketCompressor::start_int8(const torch::Tensor& buffer, Communicator& group) {
  const int64_t n = buffer.numel(), ranks = group.size(), block = options_.int8_block;
  const bool per_parameter = options_.int8_blocks_per_parameter;
  // Each rank owns a chunk of whole blocks; the buffer (or its per-parameter layout) padded to ranks such chunks.
  const int64_t laid_out = per_parameter ? int8_layout_numel() : n;
  const int64_t chunk = (laid_out + ranks * block - 1) / (ranks * block) * block;
  auto flat = buffer.view({-1});
  auto input = torch::zeros({chunk * ranks}, buffer.options());
  // Runs FN(buffer offset, layout offset, length) over what the layout holds: the whole buffer, or
  // each parameter from a block boundary.
  const auto each_run = [this, n, per_parameter, block](const auto& fn) {
    if (!per_parameter) return fn(int64_t{0}, int64_t{0}, n);
    int64_t at = 0;
    for (const auto& slot : slots_) {
      const int64_t length = numel_of(slot.shape);
      fn(slot.offset, at, length);
      at += (length + block - 1) / block * block;
    }
  };
  const bool add_error = options_.error_feedback && error_.defined();
  each_run([&](int64_t from, int64_t to, int64_t length) {
    auto part = input.narrow(0, to, length).copy_(flat.narrow(0, from, length));
    if (add_error) part.add_(error_.narrow(0, from, length));
  });
  const auto quantized = quantize_int8(input, block);
  const auto codes = quantized.first, scales = quantized.second;
  torch::Tensor error;
  if (options_.error_feedback) {
    // In the buffer's layout (a checkpoint's error fits whichever layout quantises it).
    const auto lost = input - dequantize_int8(codes, scales, block);
    error = torch::zeros({n}, buffer.options());
    each_run([&](int64_t from, int64_t to, int64_t length) {
      error.narrow(0, from, length).copy_(lost.narrow(0, to, length));
    });
  }
  // Chunk r of every rank to rank r: codes and scales.
  const std::vector<int64_t> code_splits(static_cast<size_t>(ranks), chunk);
  const std::vector<int64_t> scale_splits(static_cast<size_t>(ranks), chunk / block);
  auto their_codes = torch::empty_like(codes);
  auto their_scales = torch::empty_like(scales);
  auto codes_moved = shared(group.all_to_all(their_codes, codes, code_splits, code_splits));
  auto scales_moved = shared(group.all_to_all(their_scales, scales, scale_splits, scale_splits));
  return [=, &group]() mutable {
    codes_moved->wait();
    scales_moved->wait();
    torch::NoGradGuard no_grad;
    // This rank's chunk summed in fp32 over the group, re-quantised and gathered by everyone.
    auto mine = dequantize_int8(their_codes, their_scales, block).view({ranks, chunk}).sum(0);
    const auto my_quantized = quantize_int8(mine, block);
    const auto &my_codes = my_quantized.first, &my_scales = my_quantized.second;
    auto all_codes = torch::empty_like(codes);
    auto all_scales = torch::empty_like(scales);
    auto gathered_codes = group.all_gather(all_codes, my_codes);
    auto gathered_scales = group.all_gather(all_scales, my_scales);
    gathered_codes.wait();
    gathered_scales.wait();
    const auto sum = dequantize_int8(all_codes, all_scales, block);
    each_run([&](int64_t from, int64_t to, int64_t length) {
      flat.narrow(0, from, length).copy_(sum.narrow(0, to, length));
    });
    pending_error_ = error;
  };
}

std::function<void()> BucketCompressor::start_powersgd(const torch::Tensor& buffer, Communicator& group) {
  auto flat = buffer.view({-1});
  if (options_.error_feedback && error_.defined()) flat.add_(error_);
  // P = M Q of every matrix, one tensor on the wire; the vectors, uncompressed, in another.
  std::vector<torch::Tensor> ps, vectors;
  std::vector<size_t> matrices;
  for (size_t k = 0; k < slots_.size(); ++k) {
    const auto& slot = slots_[k];
    auto values = flat.narrow(0, slot.offset, numel_of(slot.shape));
    if (!q_[k].defined()) {
      vectors.push_back(values);
      continue;
    }
    matrices.push_back(k);
    // Q orthonormal before P = M Q, as PyTorch's hook makes it (the first, random, and each warm
    // start): the span P gets is the same, but M Q of a Q whose columns differ in length as M's
    // singular values do is conditioned as their square, and fp32 loses the weakest directions.
    // (A copy: a skipped step leaves Q as it was.)
    auto q = q_[k].clone();
    orthonormalize(q);
    ps.push_back(values.view({slot.shape.front(), -1}).mm(q).view({-1}));
  }
  auto p_all = ps.empty() ? torch::zeros({0}, buffer.options()) : torch::cat(ps);
  auto v_all = vectors.empty() ? torch::zeros({0}, buffer.options()) : torch::cat(vectors);
  auto p_summed = shared(group.all_reduce(p_all));
  std::shared_ptr<CommHandle> v_summed;
  if (v_all.numel() > 0) v_summed = shared(group.all_reduce(v_all));
  return [=, &group, this]() mutable {
    p_summed->wait();
    torch::NoGradGuard no_grad;
    // Orthogonalise each P, then Q = M^T P, summed over the group.
    std::vector<torch::Tensor> p_of, qs;
    int64_t at = 0;
    for (size_t k : matrices) {
      const int64_t n = slots_[k].shape.front(), rank = q_[k].size(1);
      auto p = p_all.narrow(0, at, n * rank).view({n, rank});
      at += n * rank;
      orthonormalize(p);
      p_of.push_back(p);
      auto m = flat.narrow(0, slots_[k].offset, numel_of(slots_[k].shape)).view({n, -1});
      qs.push_back(m.t().mm(p).reshape({-1}));
    }
    auto q_all = qs.empty() ? torch::zeros({0}, flat.options()) : torch::cat(qs);
    group.all_reduce(q_all).wait();
    // The new error and Q are kept only when finite (a skipped step leaves the old ones).
    auto error =
        options_.error_feedback ? (error_.defined() ? error_.clone() : torch::zeros_like(flat)) : torch::Tensor();
    std::vector<torch::Tensor> new_q(q_.size());
    at = 0;
    for (size_t j = 0; j < matrices.size(); ++j) {
      const size_t k = matrices[j];
      const int64_t m_cols = q_[k].size(0), rank = q_[k].size(1);
      auto q_sum = q_all.narrow(0, at, m_cols * rank).view({m_cols, rank});
      at += m_cols * rank;
      auto approx_sum = p_of[j].mm(q_sum.t());
      auto m = flat.narrow(0, slots_[k].offset, approx_sum.numel());
      // The error: what of this rank's M lies outside the shared P, M - P (M^T P)^T. Summed over the
      // group it is PyTorch's hook's error (M minus the averaged result, summed: sum M - P Q_sum^T),
      // and only that sum reaches the next step's products; each rank's part stays bounded, where
      // PyTorch's also carries the rank's running deviation from the mean, which grows step by step
      // and costs fp32 precision in the sums (seen: at full rank the losses drifted 4% in 55 steps).
      if (options_.error_feedback) {
        const auto q_local = qs[j].view({m_cols, rank});
        error.narrow(0, slots_[k].offset, approx_sum.numel()).copy_(m - p_of[j].mm(q_local.t()).view({-1}));
      }
      new_q[k] = q_sum / static_cast<double>(average_over_);
      m.copy_(approx_sum.view({-1}));
    }
    // Kept once the step is known to be applied (end_step).
    pending_error_ = error;
    pending_q_ = std::move(new_q);
    if (v_summed) {
      v_summed->wait();
      int64_t offset = 0;
      for (auto& v : vectors) {
        v.copy_(v_all.narrow(0, offset, v.numel()));
        offset += v.numel();
      }
    }
  };
}

std::vector<torch::Tensor> BucketCompressor::state() const {
  std::vector<torch::Tensor> out{torch::tensor({reductions_}, torch::kLong),
                                 error_.defined() ? error_ : torch::zeros({0})};
  for (const auto& q : q_) out.push_back(q.defined() ? q : torch::zeros({0}));
  return out;
}

bool BucketCompressor::fits(const std::vector<torch::Tensor>& tensors, size_t& next, int64_t buffer_numel) const {
  if (next + 2 + q_.size() > tensors.size()) return false;
  const auto& count = tensors[next];
  const auto& error = tensors[next + 1];
  if (count.numel() != 1 || (error.numel() != 0 && error.numel() != buffer_numel)) return false;
  for (size_t k = 0; k < q_.size(); ++k) {
    if (tensors[next + 2 + k].numel() != (q_[k].defined() ? q_[k].numel() : 0)) return false;
  }
  next += 2 + q_.size();
  return true;
}

void BucketCompressor::set_state(const std::vector<torch::Tensor>& tensors, size_t& next) {
  TORCH_CHECK(next + 2 + q_.size() <= tensors.size(), "compression state: too few tensors");
  reductions_ = tensors[next++].item<int64_t>();
  const auto& error = tensors[next++];
  error_ = error.numel() > 0 ? error.clone() : torch::Tensor();
  for (auto& q : q_) {
    const auto& saved = tensors[next++];
    TORCH_CHECK(saved.numel() == (q.defined() ? q.numel() : 0), "compression state: a Q of another shape");
    if (q.defined()) q = saved.view(q.sizes()).clone();
  }
}

}  // namespace loom::parallel
