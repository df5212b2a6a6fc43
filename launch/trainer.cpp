#include "launch/trainer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "core/cpu_memory.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/logging.h"
#include "launch/blas_environment.h"
#include "parallel/launch_env.h"
#ifndef LOOM_WITHOUT_GLOO
#include "parallel/gloo_communicator.h"
#endif
#ifdef LOOM_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif
#include "optim/fully_sharded_adamw.h"
#include "optim/partitioned_optimizer.h"
#include "optim/zero_adamw.h"
#include "parallel/traffic_report.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buffer;
}

// What this build can train; the rest of a valid config arrives with later features.
void require_supported(const Config& c, const torch::Device& device, int64_t world) {
  auto unsupported = [](const std::string& key, const std::string& value) {
    return InputError("config key '" + key + "': " + value +
                      " is valid but not implemented in this version of loom; training supports tp, pp, dp, "
                      "sequence_parallel, virtual_stages, checkpoints, zero_stage 0-3, ep with MoE, "
                      "precision fp32, bf16 and fp16");
  };
  const auto& p = c.parallel;
  if (p.zero_stage >= 2 && p.grad_reduce_dtype != "fp32") {
    throw InputError("config key 'parallel.grad_reduce_dtype': " + p.grad_reduce_dtype +
                     " applies to zero_stage 0 and 1; stages 2 and 3 reduce gradients in fp32");
  }
  if (c.train.precision == "fp16" && c.model.moe.enabled()) {
    // The MoE auxiliary losses inject their gradient at a fixed scale, which dynamic loss scaling would not reach.
    throw unsupported("train.precision", "fp16 with model.moe (use bf16)");
  }
  if (p.backend == "nccl" && !device.is_cuda()) {
    throw InputError("config key 'parallel.backend': nccl moves GPU tensors, but this run trains on the CPU "
                     "(train.device " + c.train.device + "; a CUDA build of LibTorch and a GPU are needed); use gloo");
  }
  if (!device.is_cuda()) return;
#ifndef LOOM_WITH_NCCL
  if (world > 1) {
    throw InputError("config key 'train.device': cuda with several ranks needs the NCCL communicator, which this "
                     "build of loom left out (CUDA or NCCL not found at configure time)");
  }
#endif
  if (p.backend == "gloo" && world > 1) {
    throw InputError("config key 'parallel.backend': gloo moves CPU tensors; with train.device cuda use nccl or auto");
  }
  // Not yet on GPUs: said here rather than failing inside a step.
  if (c.model.moe.enabled()) throw unsupported("model.moe", "a mixture of experts on train.device cuda");
  if (p.zero_stage >= 2 && p.dp > 1) {
    // ZeRO-2/3 units free and regrow parameter storage in place, which parallel/fully_sharded.cpp does for CPU storage.
    throw unsupported("parallel.zero_stage", std::to_string(p.zero_stage) + " on train.device cuda (0 and 1 are)");
  }
  if (c.model.dropout > 0) {
    // The tensor-parallel dropout streams (parallel/tp_rng.h) are CPU generators.
    throw unsupported("model.dropout", std::to_string(c.model.dropout) + " on train.device cuda");
  }
}

// OpenBLAS keeps its own thread pool beside LibTorch's OpenMP one, and the two
// together oversubscribe the cores. Measured on 2 cores (README, "Threads"): the
// matrix products dominate, so BLAS gets the rank's threads and LibTorch's
// elementwise ops run on one.
int set_threads(const Config& config, const parallel::LaunchInfo& launch) {
  int threads = static_cast<int>(config.train.threads_per_rank);
  if (threads == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, launch.local_world));
  }
  using SetThreads = void (*)(int);
  if (auto openblas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    openblas(threads);
    at::set_num_threads(1);
  } else {
    at::set_num_threads(threads);
  }
  return threads;
}

// Model FLOPs per second per rank, and their share of the device's peak (MFU)
// when one is configured or known: train.peak_tflops, else the GPU's dense bf16
// data-sheet peak (core/device.h). No peak is assumed on CPU.
void report_model_flops(const Config& config, double flops_per_token, double tokens_per_s, int world,
                        const torch::Device& device) {
  const double tflops = flops_per_token * tokens_per_s / static_cast<double>(world) / 1e12;
  double peak = config.train.peak_tflops;
  std::string source = "train.peak_tflops";
  if (peak <= 0.0 && device.is_cuda()) {
    const std::string name = gpu_name(device.index());
    peak = known_bf16_peak_tflops(name);
    source = (name.empty() ? std::string("unnamed GPU") : name) + ", dense bf16 data-sheet peak";
  }
  std::string mfu;
  if (peak > 0.0) {
    mfu = fmt::format("MFU {:.1f}% of {:g} TFLOP/s per device ({})", 100.0 * tflops / peak, peak, source);
  } else if (device.is_cuda()) {
    mfu = "MFU: the peak of " + gpu_name(device.index()) + " is not known to loom (set train.peak_tflops)";
  } else {
    mfu = "MFU: no peak assumed on CPU (set train.peak_tflops)";
  }
  info0("model FLOPs: {:.4g} GFLOP per token (6 x weights + 12 L h S) | {:.4g} TFLOP/s per rank | {}",
        flops_per_token / 1e9, tflops, mfu);
}

// LOOM_HOST overrides the name, for containers whose ranks all share one
// hostname though they sit on different machines (and for tests).
std::string host_name() {
  if (const char* host = std::getenv("LOOM_HOST")) return host;
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("unknown");
}

// The signal a cluster scheduler sends before preemption (SIGTERM) or a user's
// Ctrl-C: recorded, so that the step in flight finishes and is saved. A
// handler can only reach a variable with static storage; nothing else is global.
std::atomic<int> g_stop_signal{0};

extern "C" void record_stop_signal(int signal) { g_stop_signal.store(signal); }

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int stop_signal() { return g_stop_signal.load(); }

std::string default_run_dir(const std::string& config_path) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  std::string base = "runs/" + fs::path(config_path).stem().string() + "-" + stamp;
  std::string dir = base;
  for (int i = 2; fs::exists(dir); ++i) dir = base + "-" + std::to_string(i);
  return dir;
}

// Rank 0 chooses and creates the run directory; the others learn it from the store.
std::string agree_on_run_dir(const TrainArgs& args, const Config& config, const parallel::LaunchEnv& env) {
  std::string dir;
  if (env.rank() == 0) {
    dir = args.run_dir.empty() ? default_run_dir(args.config_path) : args.run_dir;
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) throw InputError("cannot create run directory '" + dir + "': " + error.message());
    std::ofstream(fs::path(dir) / "config.yaml") << to_yaml(config);
    std::ofstream(fs::path(dir) / "metrics.jsonl", std::ios::trunc);
    if (env.store()) env.store()->set("run_dir", std::vector<uint8_t>(dir.begin(), dir.end()));
  } else {
    auto bytes = env.store()->get("run_dir");
    dir.assign(bytes.begin(), bytes.end());
  }
  return dir;
}

// Each stage's busy time, the measured bubble (the idle share of each stage's
// pipeline time, averaged over stages) and the formula's (p-1)/(m v + p-1).
nlohmann::json pipeline_metrics(const Config& config, const std::vector<parallel::PipelineStepTiming>& stages) {
  const double p = static_cast<double>(config.parallel.pp), v = static_cast<double>(config.parallel.virtual_stages);
  const double m = static_cast<double>(config.micro_batches_per_step());
  nlohmann::json busy_ms = nlohmann::json::array();
  double bubble = 0.0;
  for (const auto& stage : stages) {
    busy_ms.push_back(stage.busy_s * 1000.0);
    bubble += (stage.wall_s > 0 ? 1.0 - stage.busy_s / stage.wall_s : 0.0) / static_cast<double>(stages.size());
  }
  return {{"schedule", config.parallel.schedule},
          {"stage_busy_ms", busy_ms},
          {"bubble", bubble},
          {"bubble_formula", (p - 1.0) / (m * v + p - 1.0)}};
}

// The transformer block a parameter belongs to, from its global name
// ("h.3.attn.qkv.weight": 3); -1 for the embeddings, final norm and output layer.
int64_t block_of_parameter(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return -1;
  const auto dot = name.find('.', 2);
  try {
    return std::stoll(name.substr(2, dot - 2));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

Trainer::Trainer(const Config& config, parallel::ProcessGroups& groups, std::string run_dir,
                 const models::PipelineModelFactory& make_model, FaultInjection fault, torch::Device device)
    : config_(config), device_(device), groups_(groups), run_dir_(std::move(run_dir)), fault_(std::move(fault)) {
  const auto& m = config_.model;
  const auto& t = config_.train;
  const auto& p = config_.parallel;
  corpus_ = open_corpus(config_.data.path, m.vocab_size, static_cast<uint64_t>(t.seed));
  sampler_ = std::make_unique<BatchSampler>(*corpus_, m.seq_len, m.vocab_size, config_.data.order == "shuffled",
                                            static_cast<uint64_t>(t.seed));
  const auto& coords = groups_.coords();
  rng_ = std::make_unique<parallel::TensorParallelRng>(static_cast<uint64_t>(t.seed), coords.tp, coords.dp, coords.pp);
  // ZeRO-2 and 3 work unit by unit (parallel/fully_sharded.h); stages 0 and 1 reduce gradient
  // buckets (parallel/grad_buckets.h).
  if (p.zero_stage >= 2 && groups_.dp().size() > 1) {
    sharded_ = std::make_unique<parallel::FullyShardedParameters>();
    if (m.moe.enabled()) {
      sharded_experts_ = std::make_unique<parallel::FullyShardedParameters>();
      sharded_->chain(sharded_experts_.get());
    }
  }
  const models::TensorParallelContext tp{&groups_.tp(), p.sequence_parallel, rng_.get(), &groups_.ep(), sharded_.get()};
  std::vector<torch::Tensor> tied;
  std::vector<models::MoEStats*> moe_stats;
  for (int64_t chunk = 0; chunk < p.virtual_stages; ++chunk) {
    auto piece = make_model(config_, tp, models::PipelinePosition{chunk * p.pp + coords.pp, p.pp * p.virtual_stages});
    // Initialised on the CPU, as in every layout, then moved: the same numbers on every device.
    piece->to(device_);
    piece->train();
    for (const auto& param : piece->parallel_parameters()) params_.push_back(param);
    for (const auto& tensor : piece->tied_parameters()) tied.push_back(tensor);
    for (auto* stats : piece->moe_stats()) moe_stats.push_back(stats);
    chunks_.push_back(std::move(piece));
  }
  if (m.moe.enabled()) moe_monitor_ = std::make_unique<MoEMonitor>(config_, moe_stats);
  TORCH_CHECK(tied.empty() || groups_.has(parallel::GroupKind::embedding),
              "rank ", groups_.rank(), " holds tied parameters but is in no embedding group");
  if (!m.init_from.empty()) init_from_hf_gpt2(config_, params_, coords.tp, groups_.tp().size());
  precision_ = Precision::from_name(t.precision);
  if (precision_.mixed() && !sharded_) {  // (sharded units keep their own fp32 master shards)
    std::vector<torch::Tensor> model;
    for (const auto& param : params_) model.push_back(param.tensor);
    master_ = std::make_unique<optim::MasterWeights>(model, precision_.params);
    for (size_t i = 0; i < params_.size(); ++i) params_[i].tensor = master_->masters()[i];
    for (auto& tensor : tied) tensor = master_->master_of(tensor);
  }
  if (precision_.loss_scaling()) {
    scaler_ = std::make_unique<optim::LossScaler>(
        optim::LossScalerOptions{t.loss_scale, t.initial_loss_scale, t.loss_scale_window, t.min_loss_scale});
  }
  // MoE experts live on one ep rank each and are reduced over expert-dp; the rest over dp.
  std::vector<torch::Tensor> tensors, expert_tensors, sequence_parallel;
  std::vector<size_t> part_of;
  for (const auto& param : params_) {
    (param.expert ? expert_tensors : tensors).push_back(param.tensor);
    part_of.push_back(param.expert ? 1 : 0);
    if (param.sequence_parallel) sequence_parallel.push_back(param.tensor);
  }
  const std::vector<int64_t> activation_shape =
      p.pp > 1 ? chunks_.front()->activation_shape(t.micro_batch_size) : std::vector<int64_t>{};
  pipeline_ = std::make_unique<parallel::PipelineExecutor>(parallel::parse_pipeline_schedule(p.schedule),
                                                           config_.micro_batches_per_step(), p.virtual_stages,
                                                           groups_.pp(), activation_shape, precision_.activations,
                                                           device_);
  schedule_ = optim::CosineSchedule{t.lr, t.min_lr, t.warmup_steps, t.steps};
  const optim::AdamWOptions adam{t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};
  const int64_t zero_stage = groups_.dp().size() > 1 ? p.zero_stage : 0;  // with one dp rank there is nothing to shard
  const int64_t bucket_bytes = static_cast<int64_t>(p.bucket_mb * 1024 * 1024);
  if (sharded_) {
    std::vector<int64_t> block_of, expert_block_of;
    for (size_t i = 0; i < params_.size(); ++i) {
      (params_[i].expert ? sharded_experts_index_ : sharded_index_).push_back(i);
      (params_[i].expert ? expert_block_of : block_of).push_back(block_of_parameter(params_[i].name));
    }
    sharded_->shard(tensors, block_of, groups_.dp(), /*shard_parameters=*/p.zero_stage == 3, 0, precision_.params);
    if (sharded_experts_) {
      sharded_experts_->shard(expert_tensors, expert_block_of, groups_.expert_dp(), p.zero_stage == 3,
                              groups_.dp().size(), precision_.params);
    }
    if (precision_.mixed()) {
      // Gradient reduction, clipping and the optimizer use the units' fp32 shards; checkpoints
      // read and write whole fp32 masters, which the units gather around them.
      // The tied embedding's sum over the embedding group works on fp32 views of its gradient.
      for (auto& tensor : tied) {
        for (size_t i = 0; i < sharded_->params().size(); ++i) {
          if (!sharded_->params()[i].is_same(tensor)) continue;
          tensor = sharded_->master_views()[i];
          tied_in_sharded_.emplace_back(i, tensor);
          break;
        }
      }
      for_each_sharded([&](parallel::FullyShardedParameters& sharded, const std::vector<size_t>& index) {
        const auto views = sharded.master_views();
        for (size_t i = 0; i < index.size(); ++i) params_[index[i]].tensor = views[i];
      });
    }
  } else if (groups_.dp().size() > 1) {
    dp_grads_ = std::make_unique<parallel::GradientBuckets>(tensors, groups_.dp(), bucket_bytes,
                                                            config_.micro_batches_per_step(), zero_stage);
    dp_grads_->defer(tied);
    if (!expert_tensors.empty()) {
      expert_grads_ = std::make_unique<parallel::GradientBuckets>(expert_tensors, groups_.expert_dp(), bucket_bytes,
                                                                  config_.micro_batches_per_step(), zero_stage,
                                                                  groups_.dp().size());
    }
  }
  if (p.grad_reduce_dtype == "bf16") {
    for (auto* buckets : {dp_grads_.get(), expert_grads_.get()}) {
      if (buckets) buckets->reduce_in(torch::kBFloat16);
    }
  }
  if (master_) {
    // Masters are outside autograd: their buckets hear of each gradient from the master weights.
    std::vector<std::pair<parallel::GradientBuckets*, size_t>> bucket_of;
    size_t dense = 0, expert = 0;
    for (const auto& param : params_) {
      bucket_of.emplace_back(param.expert ? expert_grads_.get() : dp_grads_.get(), param.expert ? expert++ : dense++);
    }
    master_->set_listener([bucket_of](size_t i) {
      if (auto* buckets = bucket_of[i].first) buckets->gradient_arrived(bucket_of[i].second);
    });
  }
  auto make_optimizer = [&](const std::vector<torch::Tensor>& part, parallel::GradientBuckets* buckets,
                            parallel::Communicator& group,
                            parallel::FullyShardedParameters* units) -> std::unique_ptr<optim::Optimizer> {
    if (units) return std::make_unique<optim::FullyShardedAdamW>(*units, group, adam);
    if (zero_stage >= 1) return std::make_unique<optim::ZeroAdamW>(part, *buckets, group, adam);
    auto plain = std::make_unique<optim::AdamW>(part, adam);
    // Without buckets the gradients are the optimizer's to place: in its flat layout.
    if (!buckets) plain->use_flat_gradients();
    return plain;
  };
  optimizer_ = make_optimizer(tensors, dp_grads_.get(), groups_.dp(), sharded_.get());
  if (!expert_tensors.empty()) {
    std::vector<std::unique_ptr<optim::Optimizer>> parts;
    parts.push_back(std::move(optimizer_));
    parts.push_back(make_optimizer(expert_tensors, expert_grads_.get(), groups_.expert_dp(), sharded_experts_.get()));
    optimizer_ = std::make_unique<optim::PartitionedOptimizer>(std::move(parts), part_of);
  }
  // Gradients exist from the start (AccumulateGrad then adds into them in
  // place), so the first step allocates only activations and temporaries, which
  // the memory report measures.
  // (ZeRO-3 allocates each unit's gradients when backward reaches it.)
  if (!sharded_) {
    torch::NoGradGuard no_grad;
    for (auto& param : params_) {
      if (!param.tensor.grad().defined()) param.tensor.mutable_grad() = torch::zeros_like(param.tensor);
    }
  }
  sequence_parallel_grads_ = std::make_unique<parallel::GradientReducer>(sequence_parallel);
  tied_grads_ = std::make_unique<parallel::GradientReducer>(tied);
  if (groups_.rank() == 0) metrics_ = std::make_unique<MetricsWriter>(run_dir_ + "/metrics.jsonl");
  checkpointer_ = std::make_unique<Checkpointer>(config_, groups_, params_, *optimizer_, *rng_);
}

Trainer::StepResult Trainer::forward_backward(int64_t consumed, double loss_scale) {
  const auto& t = config_.train;
  const int64_t micro_batches = config_.micro_batches_per_step();
  const int64_t last_chunk = config_.parallel.virtual_stages - 1;
  const bool holds_loss = groups_.coords().pp == config_.parallel.pp - 1;
  // Summed on the device, read once per step: no host synchronisation per micro-batch.
  auto loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  auto timing = pipeline_->run([&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
    const int64_t first = micro_batch_start(consumed, t.global_batch_size, config_.parallel.dp,
                                            groups_.coords().dp, t.micro_batch_size, micro);
    Batch batch = sampler_->batch(first, t.micro_batch_size);
    if (!device_.is_cpu()) {
      batch.tokens = batch.tokens.to(device_);
      batch.targets = batch.targets.to(device_);
    }
    auto& piece = *chunks_[static_cast<size_t>(chunk)];
    auto out = piece.forward(input.defined() ? input : batch.tokens, batch.targets);
    if (!holds_loss || chunk != last_chunk) return out;
    loss_sum += out.detach().to(torch::kFloat64);
    // Averaging over micro-batches here and over dp in the all-reduce makes the
    // gradient that of the mean loss over the whole global batch.
    return loss_scale == 1.0 ? out / static_cast<double>(micro_batches)
                             : out * (loss_scale / static_cast<double>(micro_batches));
  });
  // Every stage's timing and the last stage's loss reach every rank of the pipeline in one call.
  auto mine = torch::tensor({loss_sum.item<double>() / static_cast<double>(micro_batches), timing.busy_s,
                             timing.wall_s}, torch::kFloat64);
  auto all = torch::empty({groups_.pp().size(), 3}, torch::kFloat64);
  groups_.pp().all_gather(all, mine).wait();
  StepResult result;
  for (int64_t stage = 0; stage < all.size(0); ++stage) {
    result.stages.push_back({all[stage][1].item<double>(), all[stage][2].item<double>()});
  }
  auto loss = all[all.size(0) - 1].narrow(0, 0, 1).clone();
  groups_.dp().all_reduce(loss).wait();
  result.loss = loss.item<double>() / static_cast<double>(groups_.dp().size());
  return result;
}

std::function<void()> Trainer::save_fault(int64_t step) const {
  if (fault_.kind != "kill_in_save" || fault_.rank != groups_.rank() || fault_.step != step) return {};
  return [] {
    spdlog::warn("injected fault: killed halfway through saving a checkpoint");
    std::raise(SIGKILL);
  };
}

nlohmann::json Trainer::memory_report(int64_t activation_bytes) {
  int64_t params = 0, grads = 0;
  for (const auto& p : params_) {
    params += p.tensor.numel() * static_cast<int64_t>(p.tensor.element_size());
    if (!dp_grads_ && p.tensor.grad().defined()) grads += p.tensor.grad().numel() * static_cast<int64_t>(p.tensor.grad().element_size());
  }
  // Under mixed precision params_ are the fp32 masters; the model holds the bf16 (fp16) copies.
  int64_t master = master_ ? master_->master_bytes() : 0;
  if (master_) params = master_->model_bytes();
  if (sharded_) params = grads = 0;
  auto bytes = [](const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); };
  for_each_sharded([&](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) {
    // ZeRO-3: each rank holds its shards; whole units exist only while in use. ZeRO-2: whole
    // parameters. Under mixed precision the shards are the fp32 master weights.
    for (const auto& u : sharded.units()) {
      if (!sharded.shards_parameters()) params += bytes(u.full);  // (in fp32, the shard is part of it)
      if (sharded.mixed()) {
        master += bytes(u.shard);
      } else if (sharded.shards_parameters()) {
        params += bytes(u.shard);
      }
      grads += bytes(u.shard_grad);
    }
  });
  for (const auto* buckets : {dp_grads_.get(), expert_grads_.get()}) {
    for (int64_t b = 0; buckets && b < buckets->num_buckets(); ++b) {
      const auto& buffer = buckets->layout(static_cast<size_t>(b)).buffer;
      grads += buffer.numel() * static_cast<int64_t>(buffer.element_size());
    }
  }
  auto mine = torch::tensor({static_cast<double>(params), static_cast<double>(grads),
                             static_cast<double>(optimizer_->state_bytes()), static_cast<double>(activation_bytes),
                             static_cast<double>(master)},
                            torch::kFloat64);
  auto all = torch::empty({groups_.world(), 5}, torch::kFloat64);
  groups_.world_comm().all_gather(all, mine).wait();
  nlohmann::json ranks = nlohmann::json::array();
  for (int64_t r = 0; r < groups_.world(); ++r) {
    ranks.push_back({{"rank", r},
                     {"params_bytes", static_cast<int64_t>(all[r][0].item<double>())},
                     {"grads_bytes", static_cast<int64_t>(all[r][1].item<double>())},
                     // fp32 training: the parameters are the master weights (0 here)
                     {"master_bytes", static_cast<int64_t>(all[r][4].item<double>())},
                     {"optimizer_bytes", static_cast<int64_t>(all[r][2].item<double>())},
                     // The peak above the model state during the first step's forward and backward:
                     // activations kept for backward and temporaries (-1: not measured).
                     {"activation_peak_bytes", static_cast<int64_t>(all[r][3].item<double>())}});
  }
  return ranks;
}

void Trainer::for_each_sharded(
    const std::function<void(parallel::FullyShardedParameters&, const std::vector<size_t>&)>& f) {
  if (sharded_) f(*sharded_, sharded_index_);
  if (sharded_experts_) f(*sharded_experts_, sharded_experts_index_);
}

double Trainer::clip_sharded_gradients() {
  std::vector<torch::Tensor> grads, counted, expert_counted;
  for_each_sharded([&](parallel::FullyShardedParameters& sharded, const std::vector<size_t>& index) {
    for (const auto& u : sharded.units()) grads.push_back(u.shard_grad);
    // Every parameter once: tp-replicated ones on tp rank 0, tied copies at their owner.
    auto pieces = sharded.shard_grad_pieces([&](size_t i) {
      const auto& p = params_[index[i]];
      return !(p.tp_replicated() && groups_.coords().tp != 0) && !p.tied_copy;
    });
    auto& into = &sharded == sharded_experts_.get() ? expert_counted : counted;
    into.insert(into.end(), pieces.begin(), pieces.end());
  });
  optim::ExpertGroups experts;
  if (sharded_experts_) experts = {&groups_.ep(), &groups_.expert_dp()};
  return optim::clip_sharded_grad_norm(counted, grads, config_.train.grad_clip, groups_.model_parallel(), groups_.dp(),
                                       expert_counted, experts);
}

void Trainer::save_checkpoint(const TrainingState& state, const std::function<void()>& midway) {
  for_each_sharded([](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) { sharded.gather_all(); });
  checkpointer_->save(state, midway);
  for_each_sharded([](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) { sharded.release_all(); });
}

void Trainer::unscale_gradients() {
  torch::NoGradGuard no_grad;
  const double inverse = 1.0 / scaler_->scale();
  for_each_sharded([&](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) {
    for (auto& u : sharded.units()) u.shard_grad.mul_(inverse);
  });
  if (sharded_) return;
  for (auto& p : params_) {
    if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(inverse);
  }
}

void Trainer::maybe_inject_fault(int64_t step) const {
  if (fault_.kind == "kill_in_save" || fault_.kind == "overflow" || fault_.rank != groups_.rank() || fault_.step != step) return;
  spdlog::warn("injected fault: {} at step {}", fault_.kind, step);
  if (fault_.kind == "kill") std::raise(SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void Trainer::log_progress(int64_t step, double loss, double lr, double grad_norm, double step_s,
                           double mean_step_s) const {
  const auto& t = config_.train;
  const double tokens_per_s = static_cast<double>(t.global_batch_size * config_.model.seq_len) / step_s;
  const int width = static_cast<int>(std::to_string(t.steps).size());
  info0("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tokens/s | {:.0f} ms/step | ETA {}", step,
        width, t.steps, loss, lr, grad_norm, tokens_per_s, step_s * 1000.0,
        format_duration(mean_step_s * static_cast<double>(t.steps - step)));
}

TrainSummary Trainer::run(const std::string& resume) {
  const auto& t = config_.train;
  const int64_t tokens_per_step = t.global_batch_size * config_.model.seq_len;
  TrainSummary summary;
  const auto start = Clock::now();
  double timed_seconds = 0.0;  // all steps but the first, which pays for warm-up
  TrainingState state;
  if (!resume.empty()) {
    for_each_sharded([](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) { sharded.gather_all(); });
    if (auto loaded = checkpointer_->load(resume)) state = *loaded;
    for_each_sharded([](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) {
      sharded.release_all(/*take_values=*/true);
    });
    if (master_) master_->copy_to_model();
    if (scaler_ && state.loss_scale > 0) scaler_->restore(state.loss_scale, state.loss_scale_clean_steps, state.skipped_steps);
  }
  const int64_t first_step = state.step + 1;
  int64_t consumed = state.consumed_samples;
  const bool checkpointing = !config_.checkpoint.dir.empty();
  if (checkpointing) install_stop_handlers();
  summary.last_step = state.step;
  if (t.exit_after == state.step) {  // e.g. exit_after 0: save the initial state
    save_checkpoint(state, {});
    summary.stopped_early = true;
  }
  for (int64_t step = first_step; step <= t.steps && !summary.stopped_early; ++step) {
    maybe_inject_fault(step);
    const auto step_start = Clock::now();
    const double lr = schedule_.at(step - 1);
    optimizer_->zero_grad();
    if (dp_grads_) dp_grads_->start_step();
    for_each_sharded([](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) { sharded.start_step(); });
    if (expert_grads_) expert_grads_->start_step();
    if (step == first_step) CpuMemory::begin_window();
    double loss_scale = scaler_ ? scaler_->scale() : 1.0;
    if (fault_.kind == "overflow" && fault_.rank == groups_.rank() && fault_.step == step) {
      spdlog::warn("injected fault: this rank's loss is multiplied by infinity at step {}", step);
      loss_scale = std::numeric_limits<double>::infinity();
    }
    const double used_scale = scaler_ ? scaler_->scale() : 0.0;
    const StepResult result = forward_backward(consumed, loss_scale);
    // Host memory is what CpuMemory sees; on a GPU the activations live elsewhere (-1: not measured).
    int64_t activation_bytes = step == first_step ? CpuMemory::end_window() : -1;
    if (!device_.is_cpu()) activation_bytes = -1;
    if (dp_grads_) dp_grads_->mark("backward done");
    const double mean_loss = result.loss;
    // The first stage's embedding and the last stage's output layer are one
    // tied weight: each copy has half of its gradient. Their dp buckets are
    // held back until this sum is in.
    if (sharded_ && sharded_->mixed()) {
      // The units add mixed-precision gradients into fp32 buffers: the tied sum works on those.
      for (auto& [i, view] : tied_in_sharded_) view.mutable_grad() = sharded_->gradient_of(i);
    }
    if (!tied_grads_->empty()) tied_grads_->all_reduce(groups_.get(parallel::GroupKind::embedding));
    for (auto& [i, view] : tied_in_sharded_) view.mutable_grad() = torch::Tensor();  // the unit owns the buffer
    if (dp_grads_) dp_grads_->finish();
    if (expert_grads_) expert_grads_->finish();
    for_each_sharded([](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) { sharded.finish(); });
    // Sequence-parallel ranks each saw part of the sequence: their gradients of
    // replicated parameters are partial sums. Summed after the dp reduction, which
    // may still be writing the buffers until finish(); tp peers' ZeRO shards align.
    if (sharded_) {
      // tp peers' units are laid out alike, so their shards hold the same parameters' pieces.
      std::vector<torch::Tensor> pieces;
      for_each_sharded([&](parallel::FullyShardedParameters& sharded, const std::vector<size_t>& index) {
        auto mine = sharded.shard_grad_pieces([&](size_t i) { return params_[index[i]].sequence_parallel; });
        pieces.insert(pieces.end(), mine.begin(), mine.end());
      });
      parallel::all_reduce_pieces(pieces, groups_.tp());
    } else {
      sequence_parallel_grads_->all_reduce(groups_.tp());
    }
    optim::ExpertGroups experts;
    if (moe_monitor_) experts = {&groups_.ep(), nullptr};
    if (scaler_) unscale_gradients();
    const double grad_norm =
        sharded_ ? clip_sharded_gradients()
                 : optim::clip_grad_norm(params_, t.grad_clip, groups_.model_parallel(), groups_.coords().tp, nullptr,
                                         experts);
    // An overflow anywhere makes the global norm inf or nan on every rank alike, so all skip together.
    const bool skipped = scaler_ && scaler_->update(!std::isfinite(grad_norm));
    if (skipped) {
      info0("fp16: gradients overflowed at step {}; the step is skipped and the loss scale goes {} -> {}", step,
            used_scale, scaler_->scale());
    } else {
      optimizer_->step(lr);
      for_each_sharded([](parallel::FullyShardedParameters& sharded, const std::vector<size_t>&) { sharded.gather_updated(); });
      if (master_) master_->copy_to_model();
    }
    consumed += t.global_batch_size;
    // A GPU runs behind the host: the step ends when its queued work has.
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
    const double step_s = seconds_since(step_start);

    const int64_t done = step - first_step;  // steps timed before this one
    if (done > 0) timed_seconds += step_s;
    const double mean_step_s = done > 0 ? timed_seconds / static_cast<double>(done) : step_s;
    if (step == first_step) summary.first_loss = mean_loss;
    summary.last_loss = mean_loss;
    // Model-state bytes of every rank, once: they do not change between steps.
    nlohmann::json memory, moe;
    if (step == first_step) memory = memory_report(activation_bytes);
    if (moe_monitor_) moe = moe_monitor_->collect(groups_);
    if (metrics_) {
      nlohmann::json record{{"step", step},
                            {"loss", mean_loss},
                            {"lr", lr},
                            {"grad_norm", grad_norm},
                            {"step_ms", step_s * 1000.0},
                            {"tokens_per_s", static_cast<double>(tokens_per_step) / step_s},
                            {"consumed_samples", consumed}};
      if (config_.parallel.pp > 1) record["pipeline"] = pipeline_metrics(config_, result.stages);
      if (scaler_) {
        record["loss_scale"] = used_scale;
        record["skipped"] = skipped;
      }
      if (!memory.is_null()) record["memory"] = memory;
      if (!moe.is_null()) record["moe"] = moe;
      metrics_->write(record);
    }
    if (step == 1 || step % config_.log.interval == 0 || step == t.steps) {
      log_progress(step, mean_loss, lr, grad_norm, step_s, mean_step_s);
    }
    summary.last_step = step;
    TrainingState now{step, consumed};
    if (scaler_) {
      now.loss_scale = scaler_->scale();
      now.loss_scale_clean_steps = scaler_->clean_steps();
      now.skipped_steps = scaler_->skipped_steps();
    }
    // A preemption signal may reach only some ranks: they agree before anyone stops.
    bool stop = false;
    if (checkpointing) {
      auto flag = torch::full({1}, static_cast<double>(stop_signal()), torch::kFloat64);
      groups_.world_comm().all_reduce(flag, parallel::ReduceOp::max).wait();
      stop = flag.item<double>() > 0;
    }
    if (stop || step == t.exit_after) {
      save_checkpoint(now, save_fault(step));
      info0(stop ? "stopped by a signal after step {}; the checkpoint is saved, resume with --resume auto"
                 : "train.exit_after {}: saved; resume with --resume auto to continue", step);
      summary.stopped_early = true;
    } else if (config_.checkpoint.interval > 0 && (step % config_.checkpoint.interval == 0 || step == t.steps)) {
      save_checkpoint(now, save_fault(step));
    }
  }
  if (config_.log.trace && dp_grads_) {
    nlohmann::json events = nlohmann::json::array();
    for (const auto& e : dp_grads_->trace()) events.push_back({{"event", e.what}, {"seconds", e.seconds}});
    std::ofstream(run_dir_ + "/trace_rank" + std::to_string(groups_.rank()) + ".json")
        << nlohmann::json{{"step", summary.last_step}, {"buckets", dp_grads_->num_buckets()}, {"events", events}}.dump(1)
        << "\n";
  }
  summary.steps = summary.last_step - state.step;
  summary.seconds = seconds_since(start);
  summary.tokens_per_s = summary.steps > 1 ? static_cast<double>(tokens_per_step * (summary.steps - 1)) / timed_seconds
                                           : static_cast<double>(tokens_per_step) / summary.seconds;
  return summary;
}

int train(const TrainArgs& args, const models::PipelineModelFactory& make_model) {
  Config config = load_config(args.config_path, args.overrides);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000.0));
  parallel::LaunchEnv env(timeout);
  init_logging(env.rank(), env.world());
  resolve_and_validate(config, env.world());
  const torch::Device device = resolve_train_device(config.train.device, env.info().local_rank, env.info().local_world);
  use_device(device);
  require_supported(config, device, env.world());
  if (args.fault.rank >= env.world()) throw InputError("--inject-fault rank " + std::to_string(args.fault.rank) + " is not below the world size");
  if (args.fault.kind == "overflow" && config.train.precision != "fp16") {
    throw InputError("--inject-fault overflow tests fp16 loss scaling: it needs train.precision fp16, not " +
                     config.train.precision);
  }
  const int threads = set_threads(config, env.info());
  CpuMemory::install();  // before the model exists, so that its step's allocations are counted
  CpuMemory::keep_freed_memory();

  const auto& p = config.parallel;
  parallel::RankGrid grid({p.tp, p.pp, p.dp, p.ep}, p.order);
  if (args.fault.kind == "overflow" && grid.coords(args.fault.rank).pp != p.pp - 1) {
    throw InputError("--inject-fault " + std::to_string(args.fault.rank) +
                     ":STEP:overflow: the overflow is injected through the loss, which only the last pipeline "
                     "stage holds; pick one of its ranks");
  }
  auto stats = std::make_shared<parallel::CommStats>();
  parallel::CommunicatorFactory factory;
#ifdef LOOM_WITH_NCCL
  if (device.is_cuda()) factory = parallel::make_nccl_factory(env.store(), device.index(), stats, timeout);
#endif
#ifndef LOOM_WITHOUT_GLOO
  if (!device.is_cuda()) factory = parallel::make_gloo_factory(env.store(), env.single_host(), stats, timeout);
#else
  if (!device.is_cuda() && env.world() > 1) {
    throw InputError("this loom was built without Gloo (LOOM_WITH_GLOO=OFF), so CPU ranks cannot talk; "
                     "train on GPUs (train.device cuda) or as one process");
  }
#endif
  parallel::ProcessGroups groups(grid, env.rank(), factory, stats);
  const std::string run_dir = agree_on_run_dir(args, config, env);

  Trainer trainer(config, groups, run_dir, make_model, args.fault, device);
  const std::string spin = blas_spin_setting();
  info0("{} ranks ({} launch) | tp={} pp={} dp={} ep={} | {} threads per rank{} | run dir {}", env.world(),
        env.info().launcher, p.tp, p.pp, p.dp, p.ep, threads, spin.empty() ? "" : " (" + spin + ")", run_dir);
  if (device.is_cuda()) {
    info0("device: {} ({}) per rank, {} backend | precision {}", device.str(), gpu_name(device.index()),
          env.world() > 1 ? "nccl" : "no", config.train.precision);
  }
  if (p.pp > 1) {
    info0("pipeline: {} schedule, {} stages x {} virtual stages, {} micro-batches per step; bubble by the formula {:.1f}%",
          p.schedule, p.pp, p.virtual_stages, config.micro_batches_per_step(),
          100.0 * static_cast<double>(p.pp - 1) /
              static_cast<double>(config.micro_batches_per_step() * p.virtual_stages + p.pp - 1));
  }
  info0("model: {} layers, hidden {}, {} heads, seq {}, vocab {} | global batch {} = micro {} x {} x dp {} | data: {}",
        config.model.num_layers, config.model.hidden_size, config.model.num_heads, config.model.seq_len,
        config.model.vocab_size, config.train.global_batch_size, config.train.micro_batch_size,
        config.micro_batches_per_step(), p.dp, config.data.path.empty() ? "synthetic" : config.data.path);
  if (config.model.moe.enabled()) {
    const auto& moe = config.model.moe;
    const auto layers = moe_layers(config).size();
    info0("moe: {} experts ({} per ep rank), top-{}, {} MoE blocks of {}, capacity factor {}{}, aux loss x{}, z-loss x{}",
          moe.num_experts, moe.num_experts / p.ep, moe.top_k, layers, config.model.num_layers, moe.capacity_factor,
          moe.capacity_factor > 0 ? "" : " (no dropping)", moe.aux_loss_coeff, moe.z_loss_coeff);
  }
  const TrainSummary summary = trainer.run(args.resume);

  std::ofstream(run_dir + "/comm_rank" + std::to_string(env.rank()) + ".json") << stats->to_json().dump(2) << "\n";
  auto report = parallel::gather_traffic_report(groups, *stats, summary.steps, host_name());
  if (!report.is_null()) {
    report["diagnostics"] = parallel::traffic_diagnostics(report, grid);
    report["last_step"] = summary.last_step;
    std::ofstream(run_dir + "/traffic.json") << report.dump(1) << "\n";
    if (env.world() > 1) std::cout << parallel::format_traffic_table(report) << std::flush;
  }
  groups.world_comm().barrier().wait();
  info0("done: {} steps in {} | loss {:.4f} -> {:.4f} | {:.0f} tokens/s | metrics in {}/metrics.jsonl", summary.steps,
        format_duration(summary.seconds), summary.first_loss, summary.last_loss, summary.tokens_per_s, run_dir);
  if (args.flops_per_token) {
    report_model_flops(config, args.flops_per_token(config), summary.tokens_per_s, env.world(), device);
  }
  return 0;
}

}  // namespace loom::launch
