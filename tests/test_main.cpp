// The unit tests' one Catch2 main. ctest runs every test case as a process of its own, and each
// wrote its scratch files (configs, tokenizers, checkpoints) into /tmp and left them there, by the
// hundred a run: each process now writes under a folder of its own (TMPDIR, which
// std::filesystem::temp_directory_path reads), removed when it ends.
#define CATCH_CONFIG_RUNNER
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <system_error>

int main(int argc, char* argv[]) {
  namespace fs = std::filesystem;
  std::string scratch = (fs::temp_directory_path() / "loom_unit_XXXXXX").string();
  const bool made = mkdtemp(scratch.data()) != nullptr;
  if (made) setenv("TMPDIR", scratch.c_str(), 1);
  const int result = Catch::Session().run(argc, argv);
  if (made) {
    std::error_code error;
    fs::remove_all(scratch, error);
  }
  return result;
}
