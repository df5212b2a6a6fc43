#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/checkpoint_directory.h"
#include "core/checkpoint_store.h"
#include "core/errors.h"
#include "test_helpers.h"

using namespace loom;
namespace fs = std::filesystem;
using loom::test::read_bytes;

namespace {

// What launch/checkpoint.cpp does on every rank and then on rank 0: each rank writes its
// slices with a ShardWriter into the temporary directory, and the manifest gathers them.
// Tensor "w" (global 4 x 3) is split along dim 0 over two "ranks" (rows 0-1 and 2-3),
// "b" is saved whole by rank 0, and each rank saves a blob of raw bytes.
struct SavedTensors {
  torch::Tensor w = torch::arange(12, torch::kFloat32).reshape({4, 3}) * 0.5 - 1.25;
  torch::Tensor b = torch::tensor({3.0f, -7.5f, 1e-20f});
  torch::Tensor blob0 = torch::tensor({1, 2, 3, 250}, torch::kUInt8);
  torch::Tensor blob1 = torch::tensor({9, 8}, torch::kUInt8);
};

nlohmann::json write_ranks(const std::string& temporary, const SavedTensors& t) {
  fs::create_directories(temporary);
  ShardWriter rank0(temporary, "rank_00000.bin");
  rank0.add("w", {4, 3}, 0, 0, t.w.narrow(0, 0, 2));
  rank0.add("b", {3}, -1, 0, t.b);
  rank0.add_bytes("rng/rank_0", t.blob0);
  ShardWriter rank1(temporary, "rank_00001.bin");
  rank1.add("w", {4, 3}, 0, 2, t.w.narrow(0, 2, 2));
  rank1.add_bytes("rng/rank_1", t.blob1);
  nlohmann::json manifest;
  manifest["step"] = 0;
  manifest["consumed_samples"] = 0;
  manifest["optimizer_steps"] = 0;
  manifest["layout"] = nlohmann::json::object();
  manifest["model"] = nlohmann::json::object();
  manifest["tensors"] = nlohmann::json::object();
  manifest["blobs"] = nlohmann::json::object();
  for (auto* writer : {&rank0, &rank1}) {
    const auto written = writer->finish();
    const auto& file = written.at("file");
    manifest["files"][file.at("name").get<std::string>()] = {{"bytes", file.at("bytes")}, {"crc32", file.at("crc32")}};
    for (const auto& e : written.at("entries")) {
      const std::string name = e.at("tensor").get<std::string>();
      if (e.value("dtype", "F32") == "U8") {
        manifest["blobs"][name] = e;
        continue;
      }
      manifest["tensors"][name]["global_shape"] = e.at("global_shape");
      manifest["tensors"][name]["slices"].push_back(e);
    }
  }
  return manifest;
}

std::string save(const std::string& dir, int64_t step, const SavedTensors& t, int64_t keep = 3) {
  auto manifest = write_ranks(temporary_checkpoint_path(dir, step), t);
  manifest["step"] = step;
  return publish_checkpoint(dir, step, manifest, keep);
}

std::vector<int64_t> steps_of(const std::vector<CheckpointInfo>& list) {
  std::vector<int64_t> steps;
  for (const auto& c : list) steps.push_back(c.step);
  return steps;
}

}  // namespace

TEST_CASE("checkpoint store: slices saved by two ranks read back whole and at another split", "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_round_trip");
  const SavedTensors t;
  const auto path = save(dir, 40, t);

  CHECK(checkpoint_name(40) == "step_00000040");
  CHECK(path == (fs::path(dir) / "step_00000040").string());
  CHECK_FALSE(fs::exists(temporary_checkpoint_path(dir, 40)));  // renamed, not copied
  CHECK(read_bytes(fs::path(dir) / "latest") == "step_00000040\n");
  REQUIRE(list_checkpoints(dir).size() == 1);
  CHECK(list_checkpoints(dir)[0].path == path);
  CHECK(verify_checkpoint(path).empty());

  const auto manifest = read_manifest(path);
  CHECK(manifest.at("step") == 40);
  // The files hold the float32 bytes of what each rank wrote, nothing more.
  CHECK(fs::file_size(fs::path(path) / "rank_00000.bin") == (6 + 3) * 4 + 4);
  CHECK(fs::file_size(fs::path(path) / "rank_00001.bin") == 6 * 4 + 2);

  auto whole = read_tensor_slice(path, manifest, "w", -1, 0, 0);
  REQUIRE(whole.has_value());
  CHECK(torch::equal(*whole, t.w));
  // Rows 1 and 2 come from two different files.
  auto middle = read_tensor_slice(path, manifest, "w", 0, 1, 2);
  REQUIRE(middle.has_value());
  CHECK(torch::equal(*middle, t.w.narrow(0, 1, 2)));
  auto last_row = read_tensor_slice(path, manifest, "w", 0, 3, 1);
  REQUIRE(last_row.has_value());
  CHECK(torch::equal(*last_row, t.w.narrow(0, 3, 1)));
  // A tensor saved whole is cut at load when a layout asks for a part.
  auto b_part = read_tensor_slice(path, manifest, "b", 0, 1, 2);
  REQUIRE(b_part.has_value());
  CHECK(torch::equal(*b_part, t.b.narrow(0, 1, 2)));
  CHECK_FALSE(read_tensor_slice(path, manifest, "nope", -1, 0, 0).has_value());
  // Split along dim 0: asking along dim 1 is a contradiction, not a silent misread.
  CHECK_THROWS(read_tensor_slice(path, manifest, "w", 1, 0, 1));

  auto blob0 = read_checkpoint_bytes(path, manifest, "rng/rank_0");
  auto blob1 = read_checkpoint_bytes(path, manifest, "rng/rank_1");
  REQUIRE(blob0.has_value());
  REQUIRE(blob1.has_value());
  CHECK(torch::equal(*blob0, t.blob0));
  CHECK(torch::equal(*blob1, t.blob1));
  CHECK_FALSE(read_checkpoint_bytes(path, manifest, "rng/rank_2").has_value());
  fs::remove_all(dir);
}

TEST_CASE("checkpoint store: a tensor missing a slice is refused, not filled with garbage", "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_missing_slice");
  const SavedTensors t;
  auto manifest = write_ranks(temporary_checkpoint_path(dir, 1), t);
  manifest["tensors"]["w"]["slices"].erase(1);  // rows 2 and 3
  manifest["step"] = 1;
  const auto path = publish_checkpoint(dir, 1, manifest, 1);
  // The manifest is refused whole (its slices do not cover the tensor); read past that check, a
  // read of the rows it holds works and one that needs the missing rows is refused.
  CHECK_THROWS_WITH(read_manifest(path), Catch::Contains("tensors.w.its slices do not cover global_shape [4,3]"));
  CHECK(torch::equal(*read_tensor_slice(path, manifest, "w", 0, 0, 2), t.w.narrow(0, 0, 2)));
  CHECK_THROWS_AS(read_tensor_slice(path, manifest, "w", -1, 0, 0), InputError);
  CHECK_THROWS_WITH(read_tensor_slice(path, manifest, "w", 0, 1, 2),
                    Catch::Contains("'w'") && Catch::Contains("1 of 2"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint store: a flipped byte, a truncated or missing file is refused naming the file",
          "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_corrupt");
  const SavedTensors t;
  const auto path = save(dir, 7, t);
  const fs::path file = fs::path(path) / "rank_00001.bin";
  REQUIRE(verify_checkpoint(path).empty());
  const auto original = read_bytes(file);

  SECTION("flipped byte") {
    std::string bytes = original;
    bytes[5] = static_cast<char>(bytes[5] ^ 0x10);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    REQUIRE(fs::file_size(file) == original.size());  // same size: only the checksum can tell
    const auto problem = verify_checkpoint(path);
    CHECK_THAT(problem, Catch::Contains(file.string()) && Catch::Contains("CRC-32"));
  }
  SECTION("truncated") {
    fs::resize_file(file, original.size() - 3);
    const auto problem = verify_checkpoint(path);
    CHECK_THAT(problem, Catch::Contains(file.string()) && Catch::Contains("truncated") &&
                            Catch::Contains(std::to_string(original.size() - 3) + " bytes"));
  }
  SECTION("missing") {
    fs::remove(file);
    CHECK_THAT(verify_checkpoint(path), Catch::Contains(file.string()) && Catch::Contains("missing"));
  }
  SECTION("manifest not JSON") {
    std::ofstream(fs::path(path) / "manifest.json", std::ios::trunc) << "{\"step\": 7, \"files\": {";
    CHECK_THROWS_AS(read_manifest(path), InputError);
    CHECK_THROWS_WITH(read_manifest(path),
                      Catch::Contains((fs::path(path) / "manifest.json").string()) && Catch::Contains("corrupted"));
    CHECK_FALSE(verify_checkpoint(path).empty());
  }
  SECTION("manifest of another format") {
    std::ofstream(fs::path(path) / "manifest.json", std::ios::trunc) << R"({"format": "something-else", "files": {}})";
    CHECK_THROWS_WITH(read_manifest(path), Catch::Contains("manifest.json") && Catch::Contains("loom-checkpoint-2"));
    CHECK_FALSE(verify_checkpoint(path).empty());
  }
  SECTION("no manifest") {
    fs::remove(fs::path(path) / "manifest.json");
    CHECK_THROWS_WITH(read_manifest(path), Catch::Contains(path) && Catch::Contains("no manifest.json"));
    CHECK(list_checkpoints(dir).empty());  // a directory without a manifest is never a checkpoint
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint store: a save interrupted before publishing leaves the previous checkpoint",
          "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_interrupted");
  SavedTensors first;
  const auto published = save(dir, 10, first);

  // Step 20: every rank wrote its file, then the job died before the manifest and the rename.
  SavedTensors second;
  second.w = second.w * 2;
  write_ranks(temporary_checkpoint_path(dir, 20), second);
  REQUIRE(fs::exists(fs::path(temporary_checkpoint_path(dir, 20)) / "rank_00000.bin"));
  // And a directory with the final name but no manifest (a crash inside someone's copy).
  fs::create_directories(fs::path(dir) / "step_00000030");

  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{10});
  CHECK(read_bytes(fs::path(dir) / "latest") == "step_00000010\n");
  CHECK(verify_checkpoint(published).empty());
  const auto manifest = read_manifest(published);
  CHECK(torch::equal(*read_tensor_slice(published, manifest, "w", -1, 0, 0), first.w));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint store: publishing keeps the newest KEEP, newest first, and replaces a same-step save",
          "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_keep");
  SavedTensors t;
  for (int64_t step : {100, 200, 300}) save(dir, step, t, 2);
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{300, 200});
  CHECK_FALSE(fs::exists(fs::path(dir) / "step_00000100"));
  CHECK(read_bytes(fs::path(dir) / "latest") == "step_00000300\n");
  // An older save of the same step (a resumed run reaching it again) is replaced, and set aside.
  SavedTensors again;
  again.b = torch::tensor({0.0f, 1.0f, 2.0f});
  const auto path = save(dir, 300, again, 2);
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{300, 200});
  CHECK(torch::equal(*read_tensor_slice(path, read_manifest(path), "b", -1, 0, 0), again.b));
  CHECK(verify_checkpoint(path).empty());
  CHECK(fs::exists(fs::path(dir) / "step_00000300.replaced" / "manifest.json"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint directory: retention renames a checkpoint out of the list before removing it",
          "[checkpoint_store]") {
  // A job killed while retention removes a checkpoint's files leaves .step_N.deleting, which is no
  // checkpoint (nothing set aside as corrupt and kept for ever) and which the next save or
  // start removes.
  const auto dir = test::temp_dir("ckpt_deleting");
  SavedTensors t;
  for (int64_t step : {10, 20}) save(dir, step, t, 2);
  fs::create_directories(fs::path(dir) / ".step_00000005.deleting");
  std::ofstream(fs::path(dir) / ".step_00000005.deleting" / "rank_00000.bin") << "half gone";
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{20, 10});
  CHECK(unreadable_checkpoints(dir).empty());
  save(dir, 30, t, 2);  // retention removes step 10, and finishes the leftover
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{30, 20});
  CHECK_FALSE(fs::exists(fs::path(dir) / ".step_00000005.deleting"));
  CHECK_FALSE(fs::exists(fs::path(dir) / ".step_00000010.deleting"));
  fs::create_directories(fs::path(dir) / ".step_00000010.deleting");
  CHECK(remove_unfinished_saves(dir).empty());  // removed, not reported as an unfinished save
  CHECK_FALSE(fs::exists(fs::path(dir) / ".step_00000010.deleting"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint directory: a folder without a manifest is listed as unreadable and never deleted",
          "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_unreadable");
  SavedTensors t;
  for (int64_t step : {10, 20}) save(dir, step, t, 1);
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{20});
  save(dir, 30, t, 1);
  fs::remove(fs::path(dir) / "step_00000030" / "manifest.json");
  CHECK(list_checkpoints(dir).empty());
  CHECK(unreadable_checkpoints(dir) == std::vector<std::string>{(fs::path(dir) / "step_00000030").string()});
  // Retention counts checkpoints only; a save of the same step moves the folder out of its way.
  save(dir, 40, t, 1);
  CHECK(fs::exists(fs::path(dir) / "step_00000030" / "rank_00000.bin"));
  save(dir, 30, t, 1);
  CHECK(fs::exists(fs::path(dir) / "step_00000030.unreadable" / "rank_00000.bin"));
  CHECK(unreadable_checkpoints(dir).empty());
  fs::remove_all(dir);
}

TEST_CASE("checkpoint directory: retention keeps the newest verified checkpoint whatever keep says",
          "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_verified");
  SavedTensors t;
  save(dir, 10, t, 1);
  mark_verified((fs::path(dir) / "step_00000010").string());
  save(dir, 20, t, 1);  // unverified: step 10 stays as the newest verified
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{20, 10});
  mark_verified((fs::path(dir) / "step_00000020").string());
  save(dir, 30, t, 1);  // step 20 is now the newest verified; step 10 goes
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{30, 20});
  CHECK(is_verified((fs::path(dir) / "step_00000020").string()));
  CHECK_FALSE(is_verified((fs::path(dir) / "step_00000030").string()));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint directory: latest is tried first; set-aside checkpoints are no longer checkpoints",
          "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_latest");
  SavedTensors t;
  for (int64_t step : {10, 20, 30}) save(dir, step, t, 5);
  set_latest(dir, (fs::path(dir) / "step_00000020").string());
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{20, 30, 10});
  const auto moved = set_aside((fs::path(dir) / "step_00000020").string(), "corrupt");
  CHECK(moved == (fs::path(dir) / "step_00000020.corrupt").string());
  CHECK(fs::exists(fs::path(moved) / "manifest.json"));  // renamed, never deleted
  CHECK(steps_of(list_checkpoints(dir)) == std::vector<int64_t>{30, 10});
  CHECK_FALSE(latest_checkpoint(dir).has_value());  // latest names a checkpoint that is gone
  CHECK(latest_names_missing(dir) == "step_00000020");
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{30, 10});
  set_latest(dir, (fs::path(dir) / "step_00000030").string());
  CHECK(latest_names_missing(dir).empty());
  save(dir, 20, t, 5);  // a step saved again beside its set-aside namesake
  CHECK(set_aside((fs::path(dir) / "step_00000020").string(), "corrupt") ==
        (fs::path(dir) / "step_00000020.corrupt.2").string());
  fs::remove_all(dir);
}

TEST_CASE("checkpoint directory: latest may name a set-aside folder or another directory's checkpoint",
          "[checkpoint_store]") {
  // What a run resumed by hand from either, and stopped before its first save, leaves for --resume auto.
  const auto dir = test::temp_dir("ckpt_latest_elsewhere");
  const auto other = test::temp_dir("ckpt latest other");  // a space: latest holds the whole path
  SavedTensors t;
  for (int64_t step : {10, 20}) save(dir, step, t, 5);
  save(other, 15, t, 5);
  const auto abandoned = set_aside((fs::path(dir) / "step_00000020").string(), "abandoned");
  set_latest(dir, abandoned);
  CHECK(read_bytes(fs::path(dir) / "latest") == "step_00000020.abandoned\n");
  REQUIRE(latest_checkpoint(dir).has_value());
  CHECK(latest_checkpoint(dir)->path == abandoned);
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{20, 10});
  CHECK(latest_names_missing(dir).empty());
  // Another directory's, copied under a name of its own and given with a trailing slash.
  const auto elsewhere = (fs::path(other) / "base").string();
  fs::rename(fs::path(other) / "step_00000015", elsewhere);
  set_latest(dir, elsewhere + "/");
  CHECK(read_bytes(fs::path(dir) / "latest") == fs::absolute(elsewhere).lexically_normal().string() + "\n");
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{-1, 10});
  // Set aside since (or gone): it names nothing, and auto goes on with DIR's own.
  set_aside(elsewhere, "corrupt");
  CHECK_FALSE(latest_checkpoint(dir).has_value());
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{10});
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST_CASE("checkpoint store: the manifest's own checksum catches an edited byte offset", "[checkpoint_store]") {
  const auto dir = test::temp_dir("ckpt_manifest_crc");
  SavedTensors t;
  const auto path = save(dir, 5, t);
  const fs::path file = fs::path(path) / "manifest.json";
  auto manifest = nlohmann::json::parse(read_bytes(file));
  REQUIRE(manifest.contains("manifest_crc32"));
  SECTION("edited offset") {
    manifest["tensors"]["w"]["slices"][0]["byte_offset"] = 4;
    std::ofstream(file, std::ios::trunc) << manifest.dump(1);
    CHECK_THROWS_WITH(read_manifest(path), Catch::Contains(file.string()) && Catch::Contains("CRC-32"));
    CHECK_FALSE(verify_checkpoint(path).empty());
  }
  SECTION("written by hand without a checksum, a key missing") {
    manifest.erase("manifest_crc32");
    manifest["format"] = "loom-checkpoint-1";
    manifest["blobs"]["rng/rank_0"].erase("nbytes");
    std::ofstream(file, std::ios::trunc) << manifest.dump(1);
    CHECK_THROWS_WITH(read_manifest(path),
                      Catch::Contains(file.string()) && Catch::Contains("blobs.rng/rank_0.nbytes"));
  }
  SECTION("a slice reaching past its file") {
    manifest.erase("manifest_crc32");
    manifest["format"] = "loom-checkpoint-1";
    manifest["tensors"]["b"]["slices"][0]["byte_offset"] = 1 << 20;
    std::ofstream(file, std::ios::trunc) << manifest.dump(1);
    CHECK_THROWS_WITH(read_manifest(path), Catch::Contains("run past the end of rank_00000.bin"));
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint store: a manifest whose checksum was made to match is still held to its own shapes",
          "[checkpoint_store]") {
  // Values a hostile test wrote with a recomputed checksum (or the format without one): each read
  // out of bounds, trained backwards or broadcast one number over a tensor. Each is refused by name.
  const auto dir = test::temp_dir("ckpt_manifest_values");
  SavedTensors t;
  const auto path = save(dir, 5, t);
  const fs::path file = fs::path(path) / "manifest.json";
  const auto saved = nlohmann::json::parse(read_bytes(file));
  REQUIRE_NOTHROW(read_manifest(path));
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto manifest = saved;
    manifest.erase("manifest_crc32");
    manifest["format"] = "loom-checkpoint-1";
    edit(manifest);
    std::ofstream(file, std::ios::trunc) << manifest.dump(1);
    try {
      read_manifest(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused([](auto& m) { m["tensors"]["w"]["slices"][0]["dim"] = 7; }),
             Catch::Contains("tensors.w.slices[].dim 7 is not one of its dimensions"));
  CHECK_THAT(refused([](auto& m) { m["tensors"]["w"]["slices"][1]["dim"] = 1; }),
             Catch::Contains("cut along different dimensions"));
  CHECK_THAT(refused([](auto& m) { m["step"] = -5; }), Catch::Contains("step is negative"));
  CHECK_THAT(refused([](auto& m) { m["step"] = 7; }),
             Catch::Contains("step is 7, but it is the manifest of folder step_00000005"));
  CHECK_THAT(refused([](auto& m) { m["optimizer_steps"] = -3; }), Catch::Contains("optimizer_steps is negative"));
  CHECK_THAT(refused([](auto& m) { m["layout"]["tp"] = 0; }), Catch::Contains("layout.tp is 0"));
  CHECK_THAT(refused([](auto& m) { m["layout"]["zero_stage"] = 9; }), Catch::Contains("layout.zero_stage is 9"));
  // One number where the tensor has three (it was broadcast), and a global shape the slices do not fill.
  CHECK_THAT(refused([](auto& m) {
               m["tensors"]["b"]["slices"][0]["shape"] = {1};
               m["tensors"]["b"]["slices"][0]["nbytes"] = 4;
             }),
             Catch::Contains("slices[].shape [1] does not fit global_shape [3]"));
  CHECK_THAT(refused([](auto& m) {
               m["tensors"]["w"]["global_shape"] = {8, 3};
             }),
             Catch::Contains("do not cover global_shape [8,3]"));
  CHECK_THAT(refused([](auto& m) {
               m["tensors"]["w"]["global_shape"] = {4, -3};
             }),
             Catch::Contains("holds other than sizes"));
  CHECK_THAT(refused([](auto& m) { m["tensors"]["w"]["slices"][1]["offset"] = 1; }),
             Catch::Contains("do not tile it along dim 0"));
  CHECK_THAT(refused([](auto& m) { m["tensors"]["w"]["slices"][1]["offset"] = 3; }),
             Catch::Contains("run outside global_shape [4,3]"));
  CHECK_THAT(refused([](auto& m) { m["data"] = {1}; }), Catch::Contains("data is [1], not an object"));
  CHECK(refused([](auto&) {}) == "accepted");
  fs::remove_all(dir);
}

TEST_CASE("a job stopped between a save's rename and latest's update resumes from that save", "[checkpoint]") {
  const auto dir = test::temp_dir("ckpt_announced");
  const auto step = [&](int64_t n) { return (fs::path(dir) / ("step_000000" + std::to_string(n))).string(); };
  SavedTensors t;
  for (int64_t n : {10, 20, 30}) save(dir, n, t, 5);
  // What a publish leaves nothing of once it has finished.
  CHECK_FALSE(fs::exists(fs::path(dir) / "latest.publishing"));
  CHECK_FALSE(announced_checkpoint(dir).has_value());
  // Killed after step 30's folder was renamed into place, before latest moved from step 20.
  set_latest(dir, step(20));
  announce_publish(dir, step(30));
  REQUIRE(announced_checkpoint(dir).has_value());
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{30, 20, 10});
  // A rollback by hand since (latest set to step 10) is honoured; set back, the save counts again.
  std::ofstream(fs::path(dir) / "latest", std::ios::trunc) << "step_00000010\n";
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{10, 30, 20});
  std::ofstream(fs::path(dir) / "latest", std::ios::trunc) << "step_00000020\n";
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{30, 20, 10});
  // Settled by setting latest (the resume continues from it), and removed as an unfinished save's.
  set_latest(dir, step(30));
  CHECK_FALSE(fs::exists(fs::path(dir) / "latest.publishing"));
  announce_publish(dir, step(30));
  CHECK(remove_unfinished_saves(dir) == std::vector<std::string>{(fs::path(dir) / "latest.publishing").string()});
  // Killed before the rename: the announced folder is no checkpoint, and latest is tried first.
  announce_publish(dir, step(40));
  CHECK(steps_of(resume_candidates(dir)) == std::vector<int64_t>{30, 20, 10});
  // A rollback by loom settles it too.
  set_latest(dir, step(10));
  CHECK_FALSE(fs::exists(fs::path(dir) / "latest.publishing"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint store: a refused write says why, and whose fault by its errno", "[checkpoint_store]") {
  // The machine's (exit 75): no space left, as /dev/full answers every write.
  ShardWriter full("/dev", "full");
  full.add("model/w", {4096}, -1, 0, torch::ones({4096}));
  CHECK_THROWS_MATCHES(full.finish(), EnvironmentError,
                       Catch::Matchers::Message("cannot write checkpoint file '/dev/full': No space left on device"));
  // The path's (exit 2): a folder that is not there.
  ShardWriter nowhere((std::filesystem::temp_directory_path() / "loom_no_such_folder" / "ck").string(), "rank.bin");
  nowhere.add("model/w", {4}, -1, 0, torch::ones({4}));
  CHECK_THROWS_AS(nowhere.finish(), InputError);
  CHECK_THROWS_WITH(nowhere.finish(), Catch::Matchers::Contains("No such file or directory"));
}
