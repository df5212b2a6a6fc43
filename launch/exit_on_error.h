// How an error ends a loom process: its message on stderr, the rank named when there are several,
// and the exit code the README promises (2 bad input, 3 diverged, 75 the machine's, 1 the rest).
#pragma once

#include <functional>
#include <string>

namespace loom::launch {

// Runs BODY and returns its exit code; an exception it throws ends the job with the code its kind
// means (launch/exit_on_error.cpp), without running destructors.
int exit_on_error(const std::function<int()>& body);

// The text an out-of-memory failure ends with: TORCH's message (LibTorch's own, which says how much
// was asked for and, on a GPU, what the allocator holds), then what makes a rank need less.
std::string out_of_memory_text(const std::string& torch_message);

// Ends the job from any thread as an error of that CODE does: MESSAGE on stderr naming the rank,
// no destructors run (the step watchdog's thread, while the main thread is stuck).
[[noreturn]] void end_job_with_error(int code, const std::string& message);

// Whether MESSAGE is LibTorch's CPU allocator failing to allocate (a c10::Error, not an OutOfMemoryError).
bool is_host_out_of_memory(const std::string& message);

}  // namespace loom::launch
