// parallel/flat_layout.h: offsets, padding, shards and each tensor's part of a shard,
// against layouts worked out by hand.
#include <catch2/catch.hpp>

#include "parallel/flat_layout.h"

using loom::parallel::FlatLayout;

TEST_CASE("a flat layout places tensors end to end and pads to the shards", "[flat_layout]") {
  // Sizes 5, 3, 4 over 4 shards: offsets 0, 5, 8; 12 used, padded to 12 (a multiple of 4), shards of 3.
  FlatLayout even({5, 3, 4}, 4);
  CHECK(even.size() == 3);
  CHECK(even.offset(0) == 0);
  CHECK(even.offset(1) == 5);
  CHECK(even.offset(2) == 8);
  CHECK(even.used() == 12);
  CHECK(even.padded() == 12);
  CHECK(even.shard_size() == 3);
  CHECK(even.shard_begin(2) == 6);

  // 5 + 6 = 11 elements over 4 shards: padded to 12, shards of 3; one shard holds padding.
  FlatLayout padded({5, 6}, 4);
  CHECK(padded.used() == 11);
  CHECK(padded.padded() == 12);
  CHECK(padded.shard_size() == 3);

  // One shard (no sharding): the buffer is exactly the tensors.
  FlatLayout whole({7, 1});
  CHECK(whole.padded() == 8);
  CHECK(whole.shard_size() == 8);
  CHECK(whole.shard_begin(0) == 0);
  CHECK_THROWS(FlatLayout({1}, 0));
}

TEST_CASE("a tensor's part of a shard", "[flat_layout]") {
  // Sizes 5, 6 over 4 shards of 3: tensor 0 is [0, 5), tensor 1 is [5, 11).
  FlatLayout layout({5, 6}, 4);
  using Range = std::pair<int64_t, int64_t>;
  CHECK(layout.in_shard(0, layout.shard_begin(0)) == Range{0, 3});
  CHECK(layout.in_shard(0, layout.shard_begin(1)) == Range{3, 5});   // the rest of tensor 0
  CHECK(layout.in_shard(1, layout.shard_begin(1)) == Range{5, 6});   // and the start of tensor 1
  CHECK(layout.in_shard(1, layout.shard_begin(3)) == Range{9, 11});  // the padding [11, 12) is nobody's
  const auto [begin, end] = layout.in_shard(0, layout.shard_begin(2));
  CHECK(begin >= end);  // tensor 0 does not reach shard 2
  // Every element of every tensor falls in exactly one shard.
  for (size_t j = 0; j < layout.size(); ++j) {
    int64_t covered = 0;
    for (int64_t s = 0; s < layout.shards(); ++s) {
      const auto [b, e] = layout.in_shard(j, layout.shard_begin(s));
      covered += std::max<int64_t>(0, e - b);
    }
    CHECK(covered == layout.numel(j));
  }
}

TEST_CASE("views of a flat buffer are the tensors' places in it", "[flat_layout]") {
  auto a = torch::arange(6, torch::kFloat).view({2, 3});
  auto b = torch::arange(4, torch::kFloat).add(100);
  auto layout = FlatLayout::of({a, b}, 3);
  CHECK(layout.padded() == 12);
  auto buffer = torch::zeros({layout.padded()});
  layout.view(buffer, 0, a.sizes()).copy_(a);
  layout.flat_view(buffer, 1).copy_(b);
  CHECK(torch::equal(buffer.narrow(0, 0, 6), a.reshape({-1})));
  CHECK(torch::equal(buffer.narrow(0, 6, 4), b));
  CHECK(buffer.narrow(0, 10, 2).abs().sum().item<float>() == 0.0f);  // padding untouched
  CHECK(layout.view(buffer, 0, a.sizes()).data_ptr() == buffer.data_ptr());
}
