// Compressed gradient all-reduce for the data-parallel buckets (parallel.grad_compression), as the
// background pages (003, 8.5-8.6) describe it, with the state each bucket carries between steps:
//  - bf16: the bucket sent in bf16 (as PyTorch DDP's bf16 hook), but summed in fp32: each rank's
//    chunks exchanged all-to-all, summed by the chunk's owner, rounded and all-gathered: half of
//    fp32's bytes (a bf16 ring would round every partial sum: 2% worse after 300 steps, measured).
//  - int8: block quantisation (one fp32 absmax scale per block of 256), reduced as DeepSpeed's qgZ
//    does: each rank's quantised chunks exchanged all-to-all, summed in fp32 by the chunk's owner,
//    re-quantised, and gathered: a quarter of fp32's bytes plus the scales.
//  - powersgd: each matrix M (n x m, its first dimension by the rest) as a rank-r product P Q^T
//    (Vogels et al., as PyTorch's PowerSGD hook defines it): Q orthonormalised, P = M Q summed over the
//    group and orthonormalised (Gram-Schmidt up to rank 2, Householder QR beyond), Q = M^T P summed and averaged, the
//    result P Q^T; Q kept for the next step (warm start); vectors all-reduced uncompressed; before powersgd.start_step
//    a plain all-reduce. (m + n) r 4 bytes per matrix instead of n m 4.
// Error feedback (on by default): what the compression lost this step, the input minus what was
// sent (bf16, int8's first quantisation) or, for PowerSGD's matrices, the part of each rank's M
// outside the shared P (summed over ranks, PyTorch's hook's error: see the .cpp), is added to the
// next step's gradient. Its buffers, PowerSGD's Q and
// the count of reductions are the state a checkpoint saves, per rank.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "core/config_enums.h"
#include "parallel/communicator.h"

namespace loom::parallel {

struct GradCompressionOptions {
  GradCompression kind = GradCompression::none;  // parallel.grad_compression
  bool error_feedback = true;
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_step = 1000;  // plain all-reduces before PowerSGD's first (PyTorch's start_powerSGD_iter)
  int64_t int8_block = 256;            // elements per absmax scale
  uint64_t seed = 0;                   // PowerSGD's first Q, alike on every rank
  // int8: each parameter quantised in blocks of its own, starting at a block boundary. Needed where
  // a parameter has copies outside the dp group (tp-replicated ones, the tied embedding of the first
  // and last pipeline stages): their buckets differ, and a block shared with a neighbour would scale
  // each copy differently, so that the copies, and the checkpoint's one, drift apart.
  bool int8_blocks_per_parameter = false;
};

// Where one parameter's gradient lies in its bucket's buffer.
struct BucketSlot {
  int64_t offset = 0;
  std::vector<int64_t> shape;
  // Seeds PowerSGD's first Q of this matrix: the same for every copy of one parameter whatever
  // bucket each lies in (parameter_key: its shape and first and last values).
  uint64_t key = 0;
};

// A key shared by the copies of one parameter (equal tensors) on any rank: its shape and up to 32
// of its first and 32 of its last values.
uint64_t parameter_key(const torch::Tensor& parameter);

class BucketCompressor {
 public:
  // SLOTS: the bucket's parameters (their keys seed PowerSGD's Qs); AVERAGE_OVER: what the sum is
  // divided by afterwards (the error of PowerSGD is taken against that average).
  BucketCompressor(const GradCompressionOptions& options, std::vector<BucketSlot> slots, int64_t average_over);
  // Starts reducing BUFFER (this rank's gradient) over GROUP; the function returned waits for
  // the rest, after which BUFFER holds the group's sum as the compression delivers it.
  std::function<void()> start(const torch::Tensor& buffer, Communicator& group);

  // The state carried between steps, as tensors (the count of reductions, the error buffer,
  // PowerSGD's Q per matrix), and back, in the same order.
  std::vector<torch::Tensor> state() const;
  void set_state(const std::vector<torch::Tensor>& tensors, size_t& next);
  // Whether TENSORS from NEXT on are a state of this bucket (of BUFFER_NUMEL elements, the same
  // matrices and rank); moves NEXT past it when they are.
  bool fits(const std::vector<torch::Tensor>& tensors, size_t& next, int64_t buffer_numel) const;
  // A fresh state in a run resumed after DONE steps (its checkpoint's state did not fit): counted
  // from there, so that PowerSGD starts at powersgd.start_step of the run, not of the resume.
  void set_reductions(int64_t done) { reductions_ = done; }
  // After each reduction, once the world knows whether the step's update is APPLIED: only then
  // does this step's error and PowerSGD's Q replace the last ones. A step skipped anywhere (an fp16
  // overflow on any rank, in any bucket) leaves every copy's state as it was.
  void end_step(bool applied);

 private:
  // PowerSGD: the zero columns of Q (of matrix SLOT) drawn again, alike on every rank; the others kept.
  void redraw_zero_columns(torch::Tensor& q, size_t slot) const;
  // int8 with blocks per parameter: where each slot starts in the quantised layout, and its length.
  int64_t int8_layout_numel() const;
  std::function<void()> start_bf16(const torch::Tensor& buffer, Communicator& group);
  std::function<void()> start_int8(const torch::Tensor& buffer, Communicator& group);
  std::function<void()> start_powersgd(const torch::Tensor& buffer, Communicator& group);

  GradCompressionOptions options_;
  std::vector<BucketSlot> slots_;
  int64_t average_over_;
  int64_t reductions_ = 0;
  torch::Tensor error_;          // error feedback: beside the buffer, fp32
  torch::Tensor pending_error_;  // this step's, until end_step
  std::vector<torch::Tensor> pending_q_;
  std::vector<torch::Tensor> q_;  // PowerSGD: one m x r per matrix slot (undefined for vectors)
};

// TENSORS as bytes (a uint8 tensor: each one's dtype, length and data), for a checkpoint, and back.
torch::Tensor pack_tensors(const std::vector<torch::Tensor>& tensors);
std::vector<torch::Tensor> unpack_tensors(const torch::Tensor& bytes);

// int8 block quantisation of X (a multiple of BLOCK elements): the codes and one scale per block.
std::pair<torch::Tensor, torch::Tensor> quantize_int8(const torch::Tensor& x, int64_t block);
torch::Tensor dequantize_int8(const torch::Tensor& codes, const torch::Tensor& scales, int64_t block);
// Gram-Schmidt on the columns of M (n x r), in place: what PowerSGD does to P of rank 1 or 2
// (wider ones go through Householder QR).
void orthogonalize_columns(torch::Tensor& m);

}  // namespace loom::parallel
