#include "core/metrics.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "core/errors.h"

namespace loom {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_) throw InputError("cannot write metrics file '" + path + "'");
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  // A full disk must not cut the record off while the run goes on as if nothing happened.
  if (!out_.flush()) {
    throw std::runtime_error("cannot write metrics file '" + path_ + "': " + std::strerror(errno) +
                             " (disk full?); the run stops rather than train on unrecorded");
  }
}

}  // namespace loom
