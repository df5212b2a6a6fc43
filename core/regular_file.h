// A path loom reads as a file is checked before it is opened: opening a FIFO waits for a writer,
// however long (a job that never starts, and that SIGTERM does not end while signals are held at
// start-up), and a symlink loop makes std::filesystem throw its own error, unnamed.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "core/errors.h"

namespace loom {

// Throws InputError naming WHAT and PATH when PATH exists but is not a regular file (a FIFO, a
// device, a directory, a socket) or cannot be looked at (a symlink loop). A missing PATH (or one
// under a file) passes: the caller's own "cannot open" message says it best.
inline void require_regular_file(const std::string& path, const std::string& what) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error && error != std::errc::no_such_file_or_directory && error != std::errc::not_a_directory) {
    throw InputError(what + " '" + path + "' cannot be read: " + error.message());
  }
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw InputError(what + " '" + path + "' is not a regular file" +
                     (std::filesystem::is_directory(status) ? " but a directory" : ""));
  }
}

}  // namespace loom
