#include "launch/run_directory.h"

#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/errors.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;

std::string default_run_dir(const std::string& config_path) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  std::string base = "runs/" + fs::path(config_path).stem().string() + "-" + stamp;
  std::string dir = base;
  for (int i = 2; fs::exists(dir); ++i) dir = base + "-" + std::to_string(i);
  return dir;
}

}  // namespace

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

}  // namespace loom::launch
