// Causal attention over a sequence split across the context-parallel (cp)
// group, by ring attention: each rank keeps its queries, and the keys and
// values travel round the ring in cp - 1 steps, each step's transfer posted
// before the current block is computed so that the two overlap.
//
// Load balance: the sequence is cut into 2 cp chunks and cp rank r holds
// chunks r and 2 cp - 1 - r, so every rank does the same work under the
// causal mask. With the keys and values of rank j, rank r computes
//   j == r: its own two chunks, causally (two diagonal blocks and one full one);
//   j <  r: both its query chunks against chunk j only (chunk 2cp-1-j is later than both);
//   j >  r: its later query chunk against both of j's chunks (its earlier one sees neither),
// i.e. half of a full block pair on every step after the first. Partial results
// merge by their log-sum-exp. Backward sends the keys and values round again;
// each rank's gradients for rank j's keys and values travel along with them
// and reach j after the last step: (cp - 1) key/value transfers forward and
// 2 (cp - 1) backward per rank and call. Keys and values travel in their dtype, their gradients
// in fp32; the blocks are computed in fp32.
//
// Grouped-query attention: only the kv heads travel; query head h reads kv head
// h / (heads / kv_heads).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/keyed_dropout.h"

namespace loom::parallel {

// q [B, heads, 2c, d], k and v [B, kv_heads, 2c, d]: this cp rank's chunks r and 2cp-1-r
// (c tokens each, in that order) -> the context [B, heads, 2c, d]; differentiable in q, k, v.
// SCALE multiplies the scores (1 / sqrt(d) usually). DROPOUT (optional) drops probabilities by
// their global (head, query, key) coordinates (parallel/keyed_dropout.h), as the same function
// on one rank would.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, Communicator& cp,
                             double scale, const AttentionDropout& dropout = {});

// The global positions of cp rank RANK's tokens for a sequence of SEQ_LEN over CP ranks:
// chunks RANK and 2 CP - 1 - RANK, each SEQ_LEN / (2 CP) long.
std::vector<int64_t> context_parallel_positions(int64_t seq_len, int64_t cp, int64_t rank);

// x [B, S, ...] of the whole sequence -> this rank's two chunks along dim 1 ([B, S / cp, ...]).
torch::Tensor context_parallel_slice(const torch::Tensor& x, int64_t cp, int64_t rank);

}  // namespace loom::parallel
