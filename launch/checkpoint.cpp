#include "launch/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checkpoint_store.h"
#include "core/errors.h"
#include "core/logging.h"
#include "launch/data_record.h"
#include "launch/directory_lock.h"
#include "launch/hf_source.h"
#include "launch/model_record.h"
#include "launch/resume_checks.h"
#include "launch/resume_choice.h"
#include "launch/tokenizer_record.h"
#include "launch/training_record.h"
#include "optim/lr_schedule.h"
#include "parallel/grad_compression.h"
#include "parallel/launch_env.h"

namespace loom::launch {
namespace {
namespace fs = std::filesystem;

std::string rank_file(int64_t rank, const std::string& extension) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05lld.%s", static_cast<long long>(rank), extension.c_str());
  return name;
}

nlohmann::json layout_of(const Config& c, int64_t world) {
  const auto& p = c.parallel;
  nlohmann::json layout = {{"world", world},
                           {"tp", p.tp},
                           {"pp", p.pp},
                           {"dp", p.dp},
                           {"ep", p.ep},
                           {"virtual_stages", p.virtual_stages},
                           {"zero_stage", p.zero_stage},
                           {"order", p.order}};
  if (p.hsdp()) layout["dp_shard"] = p.dp_shard;  // (ZeRO-1's buckets pad to the shard group)
  return layout;
}

// Rank 0's TEXT on every rank of WORLD (the others' TEXT is not read).
std::string text_of_rank0(parallel::Communicator& world, const std::string& text) {
  auto length = torch::full({1}, static_cast<int64_t>(text.size()), torch::kInt64);
  world.broadcast(length, 0).wait();
  // int64: the dtype proven here
  auto characters = world.rank() == 0 ? torch::tensor(std::vector<int64_t>(text.begin(), text.end()), torch::kInt64)
                                      : torch::zeros({length.item<int64_t>()}, torch::kInt64);
  world.broadcast(characters, 0).wait();
  const int64_t* codes = characters.data_ptr<int64_t>();
  return std::string(codes, codes + characters.numel());
}

}  // namespace

Checkpointer::Checkpointer(const Config& config, parallel::ProcessGroups& groups,
                           const std::vector<parallel::ParallelParameter>& params, optim::Optimizer& optimizer,
                           parallel::TensorParallelRng& rng, std::string run_dir, parallel::GradientSync* sync)
    : config_(config),
      groups_(groups),
      params_(params),
      optimizer_(optimizer),
      rng_(rng),
      sync_(sync),
      run_dir_(std::move(run_dir)),
      hf_source_(read_hf_source(config.model.init_from)),
      tokenizer_(tokenizer_record(config)) {}

// A save whose files are being written: this rank's slices, copied to host memory, and on rank 0 the
// manifest's header, taken when the state was.
struct PendingSave {
  int64_t step = 0;
  std::string temporary, path;
  std::unique_ptr<ShardWriter> shard;
  nlohmann::json header;  // rank 0
  std::function<void()> midway;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool verified = false;  // a step trained from this state had a finite loss before it was published
  // Rank 0's copy of the config, for its publishing: that runs on a thread of its own, which a job
  // that stops on a stuck disk leaves behind (parallel/rank_work.h).
  std::shared_ptr<const Config> config;
  int64_t world = 1;
  int64_t keep = 1;  // checkpoint.keep, on every rank: what a full disk's message says
};

namespace {

// This rank's files of SAVE: its slices and what the manifest needs of them; then the test hook.
void write_rank_files(PendingSave& save, int64_t rank) {
  try {
    const auto written = save.shard->finish();
    save.shard.reset();  // the host copy is no longer needed
    errno = 0;
    std::ofstream part(fs::path(save.temporary) / rank_file(rank, "json"));
    part << written.dump();
    if (!part.flush()) throw_write_error("cannot write '" + save.temporary + "/" + rank_file(rank, "json") + "'");
    if (save.midway) save.midway();
  } catch (const EnvironmentError& e) {
    const std::string what = e.what();
    if (what.find(std::strerror(ENOSPC)) == std::string::npos &&
        what.find(std::strerror(EDQUOT)) == std::string::npos && what.find("(disk full?)") == std::string::npos)
      throw;
    // A disk that holds the kept checkpoints and no more fails this save at every requeue: say why.
    const int64_t keep = save.keep;
    throw EnvironmentError(
        what + " (a save needs room for one checkpoint more than the checkpoint.keep = " + std::to_string(keep) +
        " kept: retention removes the oldest once the new one is complete; free space" +
        (keep > 1 ? ", or lower checkpoint.keep)" : ")"));
  }
}

// Rank 0, once every rank's files of SAVE are written: the manifest, the rename, `latest`, retention.
void publish_files(PendingSave& save) {
  const Config& config = *save.config;
  if (!save.header.contains("data")) save.header["data"] = data_record(config);
  nlohmann::json manifest = save.header;
  manifest["tensors"] = nlohmann::json::object();
  manifest["blobs"] = nlohmann::json::object();
  int64_t bytes = 0;
  for (int64_t r = 0; r < save.world; ++r) {
    const fs::path part = fs::path(save.temporary) / rank_file(r, "json");
    nlohmann::json written_by;
    std::ifstream(part) >> written_by;
    fs::remove(part);
    const auto& file = written_by.at("file");
    manifest["files"][file.at("name").get<std::string>()] = {{"bytes", file.at("bytes")}, {"crc32", file.at("crc32")}};
    bytes += file.at("bytes").get<int64_t>();
    for (const auto& e : written_by.at("entries")) {
      const std::string name = e.at("tensor").get<std::string>();
      if (e.value("dtype", "F32") == "U8") {
        manifest["blobs"][name] = e;
        continue;
      }
      auto& t = manifest["tensors"][name];
      t["global_shape"] = e.at("global_shape");
      t["dtype"] = "F32";
      t["slices"].push_back(e);
    }
  }
  std::ofstream(fs::path(save.temporary) / "config.yaml") << to_yaml(config);
  // Said once `latest` names it: a retention that outlasts checkpoint.timeout_s fails the job, but
  // not this checkpoint, which the log then shows as saved.
  const auto saved = [&](const std::string& path) {
    info0("saved checkpoint {} ({:.1f} MB, {} tensors) in {:.2f} s{}", path, static_cast<double>(bytes) / 1e6,
          manifest["tensors"].size(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - save.start).count(),
          config.checkpoint.async ? ", written in the background" : "");
  };
  const std::string path =
      publish_checkpoint(config.checkpoint.dir, save.step, manifest, config.checkpoint.keep, saved);
  if (save.verified) mark_verified(path);
}

}  // namespace

Checkpointer::~Checkpointer() = default;

std::shared_ptr<PendingSave> Checkpointer::snapshot(const TrainingState& state, const std::function<void()>& midway) {
  auto save = std::make_shared<PendingSave>();
  const std::string dir = config_.checkpoint.dir;
  save->step = state.step;
  save->temporary = temporary_checkpoint_path(dir, state.step);
  save->path = (fs::path(dir) / checkpoint_name(state.step)).string();
  save->midway = midway;
  save->world = groups_.world();
  const int64_t rank = groups_.rank();
  // Rank 0 makes the folder; every rank learns whether it could, so that none waits on it in the
  // next collective until parallel.timeout_s (0: made; else the errno that stopped it). This is
  // also where every rank meets at the step boundary, so a peer stuck in training is still found
  // after parallel.timeout_s, not checkpoint.timeout_s.
  std::error_code error;
  if (rank == 0) {
    fs::create_directories(dir, error);
    fs::remove_all(save->temporary, error);  // left by a job killed while saving this step
    fs::create_directories(save->temporary, error);
  }
  auto made = torch::full({1}, static_cast<double>(error ? std::max(error.value(), 1) : 0), torch::kFloat64);
  groups_.world_comm().all_reduce(made, parallel::ReduceOp::max).wait();
  if (const int failed = static_cast<int>(made.item<double>()); failed != 0) {
    throw_file_error(failed, "checkpoint.dir: cannot create '" + save->temporary + "': " +
                                 (rank == 0 ? error.message() : std::string("rank 0 could not (see its error)")));
  }

  const auto& coords = groups_.coords();
  const int64_t tp_size = groups_.tp().size();
  optimizer_.gather_moments();
  save->shard = std::make_unique<ShardWriter>(save->temporary, rank_file(rank, "bin"));
  auto& shard = *save->shard;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    // Each tensor is written once: tied copies by their owner, replicas by tp rank 0 of dp rank 0
    // (of expert-dp rank 0 for MoE experts, which differ across the ep ranks of a dp group) and cp rank 0.
    const bool dp_owner = (p.expert ? coords.expert_dp == 0 : coords.dp == 0) && coords.cp == 0;
    if (!dp_owner || !p.counted_on(coords.tp)) continue;
    const auto spec = slice_of(p, coords.tp, tp_size);
    if (spec.dim >= 0 && spec.length == 0) continue;
    const auto global = p.global_shape_for(tp_size);
    auto cut = [&](const torch::Tensor& t) { return spec.dim >= 0 ? t.narrow(spec.dim, 0, spec.length) : t; };
    shard.add("model/" + p.name, global, spec.dim, spec.offset, cut(p.tensor));
    const auto [exp_avg, exp_avg_sq] = optimizer_.moments(i);
    shard.add("exp_avg/" + p.name, global, spec.dim, spec.offset, cut(exp_avg));
    shard.add("exp_avg_sq/" + p.name, global, spec.dim, spec.offset, cut(exp_avg_sq));
  }
  shard.add_bytes("rng/rank_" + std::to_string(rank), rng_.state());
  // Gradient compression's error buffers and PowerSGD's Q differ from rank to rank.
  if (sync_ && config_.parallel.grad_compression != GradCompression::none) {
    shard.add_bytes("grad_compression/rank_" + std::to_string(rank),
                    parallel::pack_tensors(sync_->compression_state()));
  }
  optimizer_.release_moments();
  save->keep = config_.checkpoint.keep;
  if (rank == 0) {
    save->config = std::make_shared<const Config>(config_);
    auto& header = save->header;
    write_training_state(state, header);
    header["optimizer_steps"] = optimizer_.steps_taken();
    header["optimizer"] = to_string(config_.train.optimizer);
    if (config_.train.optimizer == OptimizerKind::muon)
      header["muon_groups"] = {{"include", config_.train.muon.include}, {"exclude", config_.train.muon.exclude}};
    header["lr_schedule"] = optim::lr_schedule_record(config_.train);
    header["training"] = training_settings_record(config_);
    header["grad_compression"] = to_string(config_.parallel.grad_compression);
    // The lineage: the checkpoint this state descends from, by name when it is in the same directory.
    header["parent"] = parent_.empty()                                      ? ""
                       : in_checkpoint_dir(config_.checkpoint.dir, parent_) ? fs::path(parent_).filename().string()
                                                                            : parent_;
    // The scheduler job that saved it, and a hand resume's line: a restart of that job continues it
    // (launch/resume_choice.h).
    if (const auto job = scheduler_job(); !job.empty()) header["job"] = job;
    if (!line_.empty()) header["line"] = line_;
    header["layout"] = layout_of(config_, groups_.world());
    header["model"] = model_record(config_);
    if (config_.model.moe.enabled()) header["moe_router"] = moe_router_record(config_);
    if (!hf_source_.is_null()) header["hf_source"] = hf_source_;
    if (!tokenizer_.is_null()) header["tokenizer"] = tokenizer_;
    // Read on the publishing thread the first time (up to 256 MiB of the data), kept after.
    if (!data_.is_null()) header["data"] = data_;
    if (!run_dir_.empty()) header["run_dir"] = fs::absolute(run_dir_).lexically_normal().string();
    // Where it was saved: a copy of the folder elsewhere is another run's (launch/run_directory.cpp).
    header["checkpoint_dir"] = fs::absolute(dir).lexically_normal().string();
  }
  return save;
}

std::string Checkpointer::save(const TrainingState& state, const std::function<void()>& midway) {
  finish_pending();
  auto save = snapshot(state, midway);
  parent_ = save->path;
  parent_verified_ = false;
  const std::string path = save->path;
  const int64_t rank = groups_.rank();
  if (!config_.checkpoint.async) {
    parallel::RankWork writing([save, rank] { write_rank_files(*save, rank); });
    parallel::wait_for_every_rank(groups_.world_comm(), writing, io_bound(), "writing checkpoint " + path);
    publish(save);
    return path;
  }
  // The thread shares the save: a job that stops while its disk hangs leaves the thread behind.
  writing_ = std::make_unique<parallel::RankWork>([save, rank] {
    try {
      write_rank_files(*save, rank);
    } catch (const std::exception& e) {
      log::error("writing checkpoint {} in the background failed: {}", save->path, e.what());
      throw;
    }
  });
  pending_ = std::move(save);
  return path;
}

void Checkpointer::publish(const std::shared_ptr<PendingSave>& save) {
  parallel::RankWork publishing(groups_.rank() == 0 ? std::function<void()>([save] { publish_files(*save); })
                                                    : std::function<void()>());
  parallel::wait_for_every_rank(groups_.world_comm(), publishing, io_bound(), "publishing checkpoint " + save->path);
  if (data_.is_null() && save->header.contains("data")) data_ = save->header["data"];  // (rank 0's, read there)
}

int Checkpointer::pending_status() const {
  return pending_ ? writing_->code() : 0;
}

void Checkpointer::on_world_status(int largest) {
  if (!pending_ || largest == parallel::RankWork::running) return;
  if (largest >= parallel::RankWork::failed) {  // the kind of a failure, alike on every rank
    const bool here = writing_->code() >= parallel::RankWork::failed;
    const std::string where = here ? "this rank: " + writing_->error() : "another rank (see its error)";
    parallel::throw_work_failure(largest,
                                 "writing checkpoint " + pending_->path + " in the background failed on " + where +
                                     "; the job stops here, and the previous checkpoint, if any, stays the newest");
  }
  finish_pending();
}

void Checkpointer::finish_pending() {
  if (!pending_) return;  // alike on every rank: saves are collective
  parallel::wait_for_every_rank(groups_.world_comm(), *writing_, io_bound(),
                                "writing checkpoint " + pending_->path + " in the background");
  auto save = std::move(pending_);
  writing_.reset();
  publish(save);
}

void Checkpointer::confirm_state() {
  if (parent_verified_ || parent_.empty()) return;
  parent_verified_ = true;
  if (pending_ && pending_->path == parent_) {  // not published yet: marked when it is
    pending_->verified = true;
    return;
  }
  if (groups_.rank() == 0 && in_checkpoint_dir(config_.checkpoint.dir, parent_)) mark_verified(parent_);
}

std::string Checkpointer::set_aside_diverged() {
  finish_pending();
  std::string advice = "no checkpoint to resume from: start afresh with a lower train.lr";
  if (groups_.rank() == 0 && !config_.checkpoint.dir.empty()) {
    const std::string& dir = config_.checkpoint.dir;
    if (!parent_.empty() && !parent_verified_ && in_checkpoint_dir(config_.checkpoint.dir, parent_) &&
        !is_verified(parent_)) {
      const auto moved = set_aside(parent_, "diverged");
      log::warn("set aside {} as {}: training from its state gave only non-finite losses", parent_, moved);
    }
    const auto left = list_checkpoints(dir);
    if (!left.empty()) {
      set_latest(dir, left.front().path);
      advice = "--resume auto continues from " + left.front().path;
    } else {
      std::error_code ignore;
      fs::remove(fs::path(dir) / "latest", ignore);
    }
  }
  // Rank 0's advice on every rank: each rank's error is printed, and the first to print must not
  // send the user to start afresh while checkpoints wait.
  return text_of_rank0(groups_.world_comm(), advice);
}

std::optional<TrainingState> Checkpointer::load(const std::string& resume, bool allow_data_change,
                                                const std::function<void()>& while_checking) {
  auto& world = groups_.world_comm();
  const std::string& dir = config_.checkpoint.dir;
  // Rank 0 chooses (reading every file once for the checksums) and tells the others.
  std::vector<CheckpointInfo> candidates;
  if (resume == "auto") {
    if (dir.empty()) throw InputError("--resume auto needs checkpoint.dir in the config");
    candidates = resume_candidates(dir);
  } else {
    line_ = hand_resume_line(config_, resume);
    candidates.push_back({-1, resume});
  }
  ResumeChoice chosen;
  std::string checked_path;  // rank 0's
  {
    // Rank 0 checks every file's CRC (minutes for a large checkpoint) on a thread of its own, while
    // the ranks meet: a rank 0 that stops answering meanwhile is found within parallel.timeout_s.
    // So is this run's data record (up to 256 MiB of the data read), which the choice compares.
    struct Checked {
      ResumeChoice choice;
      nlohmann::json data;
      std::string path;  // the chosen checkpoint's
    };
    auto checked = std::make_shared<Checked>();
    checked->data = data_;
    std::function<void()> work;
    if (groups_.rank() == 0) {
      work = [checked, resume, candidates, config = config_, allow_data_change, while_checking, line = line_] {
        if (while_checking) while_checking();
        if (checked->data.is_null()) checked->data = data_record(config);
        // A restarted job's hand resume goes on from where this same command's earlier attempt saved.
        std::string how = resume;
        auto mine = candidates;
        if (resume != "auto" && !parallel::first_attempt()) {
          const auto since = saved_since_by_job(resume, config, scheduler_job(), line);
          if (!since.empty()) {
            how = since.front().path;
            mine = {since.front()};
            log::warn(
                "--resume {}: this is a restart of job {}, whose earlier attempt of this same command saved {}: "
                "going on from there, not from {} again",
                resume, scheduler_job(), how, resume);
          }
        }
        checked->choice = choose_resume_checkpoint(how, mine, config, checked->data, allow_data_change);
        if (checked->choice.index >= 0) checked->path = mine[static_cast<size_t>(checked->choice.index)].path;
      };
    }
    parallel::RankWork checking(std::move(work));
    parallel::wait_for_every_rank(world, checking, io_bound(), "--resume " + resume + ": checking the checkpoints");
    chosen = checked->choice;
    checked_path = checked->path;
    if (data_.is_null()) data_ = checked->data;
  }
  auto choice = torch::full({1}, chosen.index, torch::kInt64);
  world.broadcast(choice, 0).wait();
  const std::string& refusal = chosen.refusal;  // rank 0's reason for -2
  const int64_t index = choice.item<int64_t>();
  // Every rank says why: the first rank to exit may end the job (mpirun) before rank 0 has printed.
  if (index == -2) {
    const std::string why = text_of_rank0(world, refusal);
    throw InputError("--resume " + resume + ": " + (groups_.rank() == 0 ? "" : "rank 0 refused it: ") + why);
  }
  if (index == -1) {
    warn0("--resume auto: no complete checkpoint in checkpoint.dir '{}': starting fresh", dir);
    return std::nullopt;
  }
  // Rank 0's choice by path, not by index: the others listed the folder while rank 0 may have been
  // setting corrupt checkpoints aside, so their lists can be shorter than the one the index is into.
  const std::string path = text_of_rank0(world, groups_.rank() == 0 ? checked_path : std::string());
  // (rank 0 checked it can continue this run, resume_refusal, before choosing it)
  const auto manifest = read_manifest(path);

  const auto& coords = groups_.coords();
  const int64_t tp_size = groups_.tp().size();
  auto reader = [&](const std::string& prefix) {
    return [&, prefix](const std::string& name, int64_t dim, int64_t offset, int64_t length) {
      return read_tensor_slice(path, manifest, prefix + name, dim, offset, length);
    };
  };
  std::vector<torch::Tensor> tensors, exp_avg, exp_avg_sq;
  for (size_t i = 0; i < params_.size(); ++i) {
    tensors.push_back(params_[i].tensor);
    exp_avg.push_back(torch::zeros_like(params_[i].tensor));
    exp_avg_sq.push_back(torch::zeros_like(params_[i].tensor));
  }
  const std::string source = "checkpoint '" + path + "'";
  load_parameter_slices(params_, tensors, coords.tp, tp_size, reader("model/"), source);
  load_parameter_slices(params_, exp_avg, coords.tp, tp_size, reader("exp_avg/"), source);
  load_parameter_slices(params_, exp_avg_sq, coords.tp, tp_size, reader("exp_avg_sq/"), source);
  for (size_t i = 0; i < params_.size(); ++i) optimizer_.set_moments(i, exp_avg[i], exp_avg_sq[i]);
  optimizer_.set_steps_taken(manifest.at("optimizer_steps").get<int64_t>());

  const auto saved_layout = manifest.at("layout");
  // The RNG streams follow the ranks' places, which HSDP's dp_shard does not move; the compressed
  // buckets' state follows the buckets' padding, which it does.
  auto without_shard = [](nlohmann::json layout) {
    layout.erase("dp_shard");
    return layout;
  };
  if (without_shard(saved_layout) == without_shard(layout_of(config_, groups_.world()))) {
    auto state = read_checkpoint_bytes(path, manifest, "rng/rank_" + std::to_string(groups_.rank()));
    if (!state) throw InputError(source + " has no RNG state for rank " + std::to_string(groups_.rank()));
    try {
      rng_.set_state(*state);
    } catch (const c10::Error& e) {  // a blob of the wrong size: named, not LibTorch's check alone
      throw InputError(source + ": rank " + std::to_string(groups_.rank()) +
                       "'s RNG state cannot be restored: " + e.what_without_backtrace());
    }
  } else {
    info0(
        "RNG states not restored: the checkpoint's layout {} differs from this run's {}; dropout masks will differ "
        "from an uninterrupted run",
        saved_layout.dump(), layout_of(config_, groups_.world()).dump());
  }
  restore_compression_state(path, manifest, saved_layout == layout_of(config_, groups_.world()));
  if (manifest.contains("hf_source")) hf_source_ = manifest.at("hf_source");
  // This run's data names its tokenizer; when it says nothing, the model keeps the one it was trained with.
  if (tokenizer_.is_null() && manifest.contains("tokenizer")) tokenizer_ = manifest.at("tokenizer");
  const TrainingState state = read_training_state(manifest, source);
  info0("resumed from {} at step {} ({} samples consumed)", path, state.step, state.consumed_samples);
  if (state.step < config_.train.steps) {
    optim::report_schedule_change(config_.train, manifest.value("lr_schedule", nlohmann::json()),
                                  manifest.value("train_steps", int64_t{0}),
                                  state.step);  // (train_steps: before 15a10e0)
    if (const auto changed = training_settings_change(config_, manifest.value("training", nlohmann::json()));
        !changed.empty())
      warn0("training settings changed since the checkpoint ({}): the steps from {} train with the new values", changed,
            state.step + 1);
  }
  parent_ = path;
  parent_verified_ = is_verified(path);
  return state;
}

}  // namespace loom::launch
