// What a checkpoint directory's own files say (core/checkpoint_directory.h), without a checkpoint's
// tensors: which folders are its own, what unfinished saves left, a `latest` that is no file.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/checkpoint_directory.h"
#include "test_helpers.h"

using namespace loom;
namespace fs = std::filesystem;

TEST_CASE("a checkpoint folder is the directory's own however its path is written", "[checkpoint]") {
  const auto dir = test::temp_dir("ckpt_own");
  const auto other = test::temp_dir("ckpt_other");
  fs::create_directories(fs::path(dir) / "step_00000002");
  fs::create_directories(fs::path(other) / "step_00000002");
  const std::string own = (fs::path(dir) / "step_00000002").string();
  CHECK(in_checkpoint_dir(dir, own));
  CHECK(in_checkpoint_dir(dir, own + "/"));  // a trailing slash names the same folder
  CHECK(in_checkpoint_dir(dir, (fs::path(dir) / "." / "step_00000002").string()));
  CHECK(in_checkpoint_dir(dir + "/", own));
  CHECK(in_checkpoint_dir(dir, (fs::path(other) / ".." / fs::path(dir).filename() / "step_00000002").string()));
  CHECK_FALSE(in_checkpoint_dir(dir, (fs::path(other) / "step_00000002").string()));
  CHECK_FALSE(in_checkpoint_dir(dir, dir));              // the directory itself is none of its checkpoints
  CHECK_FALSE(in_checkpoint_dir("", own));               // no checkpoint.dir: nothing is its own
  CHECK_FALSE(in_checkpoint_dir(dir + "_absent", own));  // a directory that is not there
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST_CASE("what unfinished saves left is removed, and nothing else", "[checkpoint]") {
  const auto dir = (fs::temp_directory_path() / "loom_unfinished_saves").string();
  fs::remove_all(dir);
  fs::create_directories(fs::path(dir) / ".step_00000004.tmp");
  std::ofstream(fs::path(dir) / ".step_00000004.tmp" / "rank_0.bin") << "partial";
  std::ofstream(fs::path(dir) / "latest.tmp") << "step_00000002";
  fs::create_directories(fs::path(dir) / "step_00000002");
  std::ofstream(fs::path(dir) / "latest") << "step_00000002\n";
  fs::create_directories(fs::path(dir) / ".notes.tmp");          // not a save's name: the user's
  fs::create_directories(fs::path(dir) / ".step_00000004.old");  // not a temporary folder
  const auto removed = remove_unfinished_saves(dir);
  REQUIRE(removed.size() == 2);
  CHECK(fs::path(removed[0]).filename() == ".step_00000004.tmp");
  CHECK(fs::path(removed[1]).filename() == "latest.tmp");
  CHECK_FALSE(fs::exists(fs::path(dir) / ".step_00000004.tmp"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "latest.tmp"));
  for (const char* kept : {"step_00000002", "latest", ".notes.tmp", ".step_00000004.old"})
    CHECK(fs::exists(fs::path(dir) / kept));
  CHECK(remove_unfinished_saves((fs::path(dir) / "absent").string()).empty());
  fs::remove_all(dir);
}

TEST_CASE("a 'latest' that is a directory is refused, naming it, and left alone", "[checkpoint]") {
  const auto dir = (fs::temp_directory_path() / "loom_latest_directory").string();
  fs::remove_all(dir);
  fs::create_directories(fs::path(dir) / "latest");
  fs::create_directories(fs::path(dir) / "step_00000002");
  CHECK_THROWS_WITH(set_latest(dir, (fs::path(dir) / "step_00000002").string()),
                    Catch::Contains("'latest' is a directory"));
  CHECK(fs::is_directory(fs::path(dir) / "latest"));
  fs::remove_all(dir);
}
