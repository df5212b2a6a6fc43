#include "core/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "core/errors.h"
#include "core/logging.h"

namespace loom {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const std::string& path, bool* ends_whole) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *ends_whole = text.empty() || text.back() == '\n';
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

bool is_row(const std::string& line) {
  const auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return row.is_object();
}

// Writes LINES to PATH: appended, or replacing PATH whole through a temporary file renamed over it, so
// that a kill or a full disk midway leaves the old file, never a shorter one.
void write_lines(const std::string& path, const std::vector<std::string>& lines, bool append) {
  const std::string target = append ? path : path + ".tmp";
  {
    std::ofstream out(target, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
    for (const auto& line : lines) out << line << '\n';
    if (!out.flush()) throw EnvironmentError("cannot write '" + target + "': " + std::strerror(errno));
  }
  if (append) return;
  std::error_code error;
  fs::rename(target, path, error);
  if (error) throw EnvironmentError("cannot replace '" + path + "': " + error.message());
}

// Cuts PATH back to its whole rows: a last line with no newline, or one that is not a JSON object.
void cut_torn_tail(const std::string& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return;  // absent, or a device (tests write to /dev/full)
  bool ends_whole = true;
  auto lines = read_lines(path, &ends_whole);
  if (ends_whole && (lines.empty() || is_row(lines.back()))) return;
  const std::string torn = lines.back();
  lines.pop_back();
  uintmax_t whole = 0;  // the bytes of the rows kept, each with its newline
  for (const auto& line : lines) whole += line.size() + 1;
  fs::resize_file(path, whole, error);  // cutting in place: the rows before stay where they are
  if (error) throw EnvironmentError("cannot cut the torn row off '" + path + "': " + error.message());
  log::warn("metrics.jsonl was cut back to its last whole row: '{}' ended in a torn row ({} bytes: {:.60})", path,
            torn.size(), torn);
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, std::unique_ptr<TensorBoardWriter> tensorboard)
    : path_(path), tensorboard_(std::move(tensorboard)) {
  cut_torn_tail(path);
  out_.open(path, std::ios::app | std::ios::binary);
  if (!out_) throw_file_error(errno, "cannot write metrics file '" + path + "': " + std::strerror(errno));
}

void MetricsWriter::write(const nlohmann::json& record) {
  std::error_code error;
  const auto size_before = fs::file_size(path_, error);
  out_ << record.dump() << '\n';
  // A full disk must not cut the record off while the run goes on as if nothing happened, nor leave
  // half a row for the next run to append to.
  if (!out_.flush()) {
    const std::string why = std::strerror(errno);
    out_.close();
    if (!error) fs::resize_file(path_, size_before, error);
    throw EnvironmentError("cannot write metrics file '" + path_ + "': " + why +
                           " (disk full?); the run stops rather than train on unrecorded");
  }
  if (!tensorboard_ || !record.contains("step") || !record.at("step").is_number_integer()) return;
  const auto scalars = scalars_of_record(record);
  if (!scalars.empty()) tensorboard_->write(record.at("step").get<int64_t>(), scalars);
}

void MetricsWriter::continue_after(int64_t step) {
  if (tensorboard_) tensorboard_->start_session(step + 1);
  std::error_code error;
  if (!fs::is_regular_file(path_, error)) return;
  bool ends_whole = true;
  const auto lines = read_lines(path_, &ends_whole);
  std::vector<std::string> kept, superseded;
  for (const auto& line : lines) {
    const auto row = nlohmann::json::parse(line, nullptr, false);
    const bool later = row.is_object() && row.contains("step") && row.at("step").is_number_integer() &&
                       row.at("step").get<int64_t>() > step;
    (later ? superseded : kept).push_back(line);
  }
  if (superseded.empty()) return;
  const std::string aside = (fs::path(path_).parent_path() / "metrics.superseded.jsonl").string();
  // A job killed between the append and the rewrite below has moved these rows already (they are
  // still in metrics.jsonl too): this start moves only rows the aside file does not hold yet.
  cut_torn_tail(aside);
  std::unordered_set<std::string> moved;
  if (fs::is_regular_file(aside, error)) {
    bool aside_whole = true;
    for (auto& line : read_lines(aside, &aside_whole)) moved.insert(std::move(line));
  }
  std::vector<std::string> fresh;
  for (const auto& line : superseded)
    if (!moved.count(line)) fresh.push_back(line);
  if (!fresh.empty()) write_lines(aside, fresh, /*append=*/true);
  out_.close();
  write_lines(path_, kept, /*append=*/false);
  out_.open(path_, std::ios::app | std::ios::binary);
  log::warn(
      "{} rows of steps after {} (from the attempt that stopped after that checkpoint) moved from {} to {}: "
      "those steps are trained again",
      superseded.size(), step, path_, aside);
}

namespace {

void add_if_number(Scalars& out, const nlohmann::json& object, const std::string& key, const std::string& tag,
                   double scale = 1.0) {
  if (!object.is_object()) return;
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return;
  out.emplace_back(tag, static_cast<float>(it->get<double>() * scale));
}

// The memory record is one object per rank; the largest rank is the one that runs out first.
void add_memory(Scalars& out, const nlohmann::json& memory) {
  const nlohmann::json ranks = memory.is_array() ? memory : nlohmann::json::array({memory});
  constexpr double kMiB = 1.0 / (1024.0 * 1024.0);
  for (const std::string part : {"params", "grads", "master", "optimizer", "activation_peak"}) {
    double largest = -1.0;
    for (const auto& rank : ranks) {
      if (!rank.is_object()) continue;
      const auto it = rank.find(part + "_bytes");
      if (it != rank.end() && it->is_number()) largest = std::max(largest, it->get<double>());
    }
    // -1 means "not measured" (the activation peak on a GPU).
    if (largest >= 0.0) out.emplace_back("memory/" + part + "_mib", static_cast<float>(largest * kMiB));
  }
}

void add_moe(Scalars& out, const nlohmann::json& moe) {
  add_if_number(out, moe, "aux_loss", "moe/aux_loss");
  add_if_number(out, moe, "z_loss", "moe/z_loss");
  add_if_number(out, moe, "max_imbalance", "moe/max_imbalance");
  add_if_number(out, moe, "dropped_tokens", "moe/dropped_tokens");
  if (!moe.is_object() || !moe.contains("imbalance") || !moe.contains("layers")) return;
  const auto& imbalance = moe.at("imbalance");
  const auto& layers = moe.at("layers");
  if (!imbalance.is_array() || !layers.is_array() || imbalance.size() != layers.size()) return;
  for (size_t i = 0; i < imbalance.size(); ++i) {
    if (imbalance[i].is_number() && layers[i].is_number_integer()) {
      out.emplace_back("moe/imbalance/layer_" + std::to_string(layers[i].get<int64_t>()),
                       static_cast<float>(imbalance[i].get<double>()));
    }
  }
}

// Where the step went (launch/step_split.h): compute, data, optimizer and checkpoint, and the
// exposed time of each group's collectives ("time/exposed/tp/all_reduce_ms").
void add_time_split(Scalars& out, const nlohmann::json& split) {
  for (const std::string part : {"compute", "data", "optimizer", "checkpoint"})
    add_if_number(out, split, part + "_ms", "time/" + part + "_ms");
  if (!split.is_object() || !split.contains("exposed_ms") || !split.at("exposed_ms").is_object()) return;
  for (const auto& [group_op, ms] : split.at("exposed_ms").items()) {
    if (ms.is_number()) out.emplace_back("time/exposed/" + group_op + "_ms", static_cast<float>(ms.get<double>()));
  }
}

}  // namespace

Scalars scalars_of_record(const nlohmann::json& record) {
  Scalars out;
  add_if_number(out, record, "loss", "train/loss");
  add_if_number(out, record, "avg_loss", "train/avg_loss");
  add_if_number(out, record, "lr", "train/lr");
  add_if_number(out, record, "grad_norm", "train/grad_norm");
  add_if_number(out, record, "loss_scale", "train/loss_scale");
  add_if_number(out, record, "val_loss", "val/loss");
  add_if_number(out, record, "val_ppl", "val/ppl");
  add_if_number(out, record, "tokens_per_s", "perf/tokens_per_s");
  add_if_number(out, record, "step_ms", "perf/step_ms");
  add_if_number(out, record, "checkpoint_ms", "perf/checkpoint_ms");
  if (record.contains("pipeline")) add_if_number(out, record.at("pipeline"), "bubble", "perf/pipeline_bubble");
  if (record.contains("memory")) add_memory(out, record.at("memory"));
  if (record.contains("moe")) add_moe(out, record.at("moe"));
  if (record.contains("time_split")) add_time_split(out, record.at("time_split"));
  return out;
}

}  // namespace loom
