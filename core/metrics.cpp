#include "core/metrics.h"

#include "core/errors.h"

namespace loom {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_) throw InputError("cannot write metrics file '" + path + "'");
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace loom
