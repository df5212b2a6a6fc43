// Small helpers shared by the unit tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace loom::test {

// A fresh directory under the system temp dir, unique to this process and NAME.
inline std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("loom_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// TEXT written to a new .yaml file under the system temp dir (a config for load_config).
inline std::string write_temp_yaml(const std::string& text) {
  static int counter = 0;
  auto path = std::filesystem::temp_directory_path() /
              ("loom_test_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}

// A file's whole contents.
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace loom::test
