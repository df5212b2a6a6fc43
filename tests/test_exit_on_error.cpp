// How a failure is said at the command line (launch/exit_on_error.h): LibTorch's own allocator
// failure is recognised by its real text, which a LibTorch upgrade could change.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "launch/exit_on_error.h"

using namespace loom::launch;

TEST_CASE("an allocation LibTorch's CPU allocator refuses is said as out of memory, with what makes a rank need less",
          "[errors]") {
  std::string message;
  try {
    // 1 PiB: more than any x86-64 or arm64 process can address, whatever the machine's memory.
    (void)torch::empty({int64_t{1} << 50}, torch::kUInt8);
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  }
  REQUIRE_FALSE(message.empty());
  CHECK(is_host_out_of_memory(message));
  const std::string said = out_of_memory_text(message);
  CHECK_THAT(said, Catch::StartsWith("out of memory: ") && Catch::Contains("1125899906842624 bytes"));
  CHECK_THAT(said, Catch::Contains("train.micro_batch_size") && Catch::Contains("train.memory_check"));
  CHECK_FALSE(is_host_out_of_memory("shape '[2, 3]' is invalid for input of size 5"));
}
