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

// Ends this process from any thread while another may be stuck anywhere (the step watchdog's thread):
// MESSAGE on stderr naming the rank, written with no lock that a stuck thread may hold (not stdio's:
// the main thread may be blocked writing its log to a pipe no one reads), waited for 2 s at most (stderr
// may be that pipe), then _Exit(CODE). No MPI_Abort from a thread MPI was not initialised for: mpirun
// ends the job when a rank exits without MPI_Finalize.
[[noreturn]] void end_process_now(int code, const std::string& message);

// Whether MESSAGE is LibTorch's CPU allocator failing to allocate (a c10::Error, not an OutOfMemoryError).
bool is_host_out_of_memory(const std::string& message);

}  // namespace loom::launch
