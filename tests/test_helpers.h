// Small helpers shared by the unit tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace loom::test {

// A fresh directory under the system temp dir, unique to this process and NAME.
inline std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("loom_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace loom::test
