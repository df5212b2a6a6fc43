#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error_text.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "test_helpers.h"

using namespace loom;
namespace fs = std::filesystem;
using loom::test::read_bytes;

// The format, as https://huggingface.co/docs/safetensors states it: 8 bytes, an unsigned
// little-endian 64-bit N; N bytes of UTF-8 JSON mapping each name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets relative to the byte after the header), plus an
// optional "__metadata__" of string to string; then the data, little-endian, row-major.
// The expectations below are built from that text, byte by byte, not from loom's writer.
namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

uint64_t little_endian_u64(const std::string& bytes, size_t at) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return value;
}

std::string little_endian(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

std::string f32_bytes(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return little_endian(bits, 4);
}

// A safetensors file as the spec lays it out, from a header text and the data bytes.
std::string file_of(const std::string& header, const std::string& data) {
  return little_endian(header.size(), 8) + header + data;
}

}  // namespace

TEST_CASE("safetensors: the writer's bytes follow the format", "[safetensors]") {
  const auto dir = test::temp_dir("safetensors_layout");
  const auto path = dir + "/model.safetensors";
  const auto a = torch::tensor({{1.0f, -2.0f, 0.5f}, {3.25f, 0.0f, -0.125f}});
  const auto b = torch::tensor({7.0f});
  const auto c = torch::tensor(42.5f);  // zero dimensions
  write_safetensors(path, {{"a.weight", a}, {"b", b}, {"c", c}}, {{"format", "pt"}});

  const auto bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  const uint64_t n = little_endian_u64(bytes, 0);
  REQUIRE(8 + n <= bytes.size());
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header.size() == 4);
  CHECK(header.at("__metadata__") == nlohmann::json({{"format", "pt"}}));
  CHECK(header.at("a.weight").at("dtype") == "F32");
  CHECK(header.at("a.weight").at("shape") == nlohmann::json({2, 3}));
  CHECK(header.at("a.weight").at("data_offsets") == nlohmann::json({0, 24}));
  CHECK(header.at("b").at("shape") == nlohmann::json({1}));
  CHECK(header.at("b").at("data_offsets") == nlohmann::json({24, 28}));
  CHECK(header.at("c").at("shape") == nlohmann::json::array());
  CHECK(header.at("c").at("data_offsets") == nlohmann::json({28, 32}));
  // The header may be padded with spaces; loom pads so that the data starts 8-byte aligned.
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes.size() == 8 + n + 32);

  std::string expected_data;
  for (float f : {1.0f, -2.0f, 0.5f, 3.25f, 0.0f, -0.125f, 7.0f, 42.5f}) expected_data += f32_bytes(f);
  CHECK(bytes.substr(8 + n) == expected_data);
  CHECK_FALSE(fs::exists(path + ".tmp"));  // written beside and renamed
  fs::remove_all(dir);
}

TEST_CASE("safetensors: the reader takes F32, F16 and BF16 files written by hand", "[safetensors]") {
  const auto dir = test::temp_dir("safetensors_dtypes");
  const auto path = dir + "/hand.safetensors";
  // Data in an order other than the header's, so only data_offsets can place it.
  // F16: 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800, 1.5 = 0x3E00, 65504 = 0x7BFF, 2^-24 = 0x0001.
  // BF16 (the top half of an F32): 1.0 = 0x3F80, -2.0 = 0xC000, 0.15625 = 0x3E20, 3.0 = 0x4040.
  std::string bf16, f16, f32;
  for (uint64_t bits : {0x3F80, 0xC000, 0x3E20, 0x4040}) bf16 += little_endian(bits, 2);
  for (uint64_t bits : {0x3C00, 0xC000, 0x3800, 0x3E00, 0x7BFF, 0x0001}) f16 += little_endian(bits, 2);
  for (float f : {-1.5f, 1e-30f}) f32 += f32_bytes(f);
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("half":{"dtype":"F16","shape":[2,3],"data_offsets":[8,20]},)"
                             R"("brain":{"dtype":"BF16","shape":[4,1],"data_offsets":[20,28]},)"
                             R"("single":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  write_bytes(path, file_of(header, f32 + f16 + bf16));

  const auto tensors = read_safetensors(path);
  REQUIRE(tensors.size() == 3);
  for (const auto& [name, tensor] : tensors) CHECK(tensor.scalar_type() == torch::kFloat32);
  CHECK(
      torch::equal(tensors.at("half"), torch::tensor({{1.0f, -2.0f, 0.5f}, {1.5f, 65504.0f, 5.9604644775390625e-8f}})));
  CHECK(torch::equal(tensors.at("brain"), torch::tensor({{1.0f}, {-2.0f}, {0.15625f}, {3.0f}})));
  CHECK(torch::equal(tensors.at("single"), torch::tensor({-1.5f, 1e-30f})));
  fs::remove_all(dir);
}

TEST_CASE("safetensors: write then read gives every tensor back exactly", "[safetensors]") {
  const auto dir = test::temp_dir("safetensors_round_trip");
  const auto path = dir + "/round.safetensors";
  torch::manual_seed(3);
  const auto matrix = torch::randn({5, 7});
  const auto transposed = torch::randn({4, 6}).t();  // not contiguous
  const auto cube = torch::randn({2, 3, 4});
  const auto special = torch::tensor({std::numeric_limits<float>::infinity(), -0.0f, 1e-45f, -3.4e38f});
  const auto scalar = torch::tensor(-9.0f);
  write_safetensors(path, {{"m", matrix}, {"t", transposed}, {"cube", cube}, {"special", special}, {"scalar", scalar}});
  const auto back = read_safetensors(path);
  REQUIRE(back.size() == 5);
  CHECK(torch::equal(back.at("m"), matrix));
  CHECK(torch::equal(back.at("t"), transposed));
  CHECK(torch::equal(back.at("cube"), cube));
  CHECK(torch::equal(back.at("special"), special));
  CHECK(std::signbit(back.at("special")[1].item<float>()));
  CHECK(back.at("scalar").dim() == 0);
  CHECK(back.at("scalar").item<float>() == -9.0f);
  // Writing again over the file replaces it.
  write_safetensors(path, {{"only", matrix.narrow(0, 1, 2)}});
  const auto again = read_safetensors(path);
  REQUIRE(again.size() == 1);
  CHECK(torch::equal(again.at("only"), matrix.narrow(0, 1, 2)));
  // The writer refuses what it cannot write as F32 rather than mislabel it.
  CHECK_THROWS(write_safetensors(dir + "/int.safetensors", {{"i", torch::arange(3)}}));
  // A full disk is the machine's failure (exit 75), a missing folder the user's (exit 2).
  fs::create_symlink("/dev/full", dir + "/full.safetensors.tmp");
  CHECK_THROWS_AS(write_safetensors(dir + "/full.safetensors", {{"m", torch::randn({64, 64})}}), EnvironmentError);
  CHECK_THROWS_WITH(write_safetensors(dir + "/full.safetensors", {{"m", torch::randn({64, 64})}}),
                    Catch::Contains("No space left on device"));
  CHECK_THROWS_AS(write_safetensors(dir + "/no/such/x.safetensors", {{"m", matrix}}), InputError);
  fs::remove_all(dir);
}

TEST_CASE("safetensors: malformed files are refused naming the file", "[safetensors]") {
  const auto dir = test::temp_dir("safetensors_bad");
  const auto path = dir + "/bad.safetensors";
  const std::string four_floats = f32_bytes(1) + f32_bytes(2) + f32_bytes(3) + f32_bytes(4);
  auto refused = [&](const std::string& bytes, const std::string& why) {
    write_bytes(path, bytes);
    CHECK_THROWS_AS(read_safetensors(path), InputError);
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains(path) && Catch::Contains(why));
  };
  SECTION("missing") {
    CHECK_THROWS_WITH(read_safetensors(dir + "/none.safetensors"), Catch::Contains(dir + "/none.safetensors"));
  }
  SECTION("shorter than the length field") {
    refused(std::string("\x05\x00\x00", 3), "too short");
  }
  SECTION("header longer than the file") {
    refused(little_endian(1000, 8) + R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
            "longer than the file");
  }
  SECTION("length field big endian") {
    const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
    std::string length = little_endian(header.size(), 8);
    std::reverse(length.begin(), length.end());
    refused(length + header + four_floats, "longer than the file");
  }
  SECTION("header not JSON") {
    refused(file_of("{\"a\": [1, 2", four_floats), "header");
    // Where the JSON broke; the command line's message leaves out the library's exception id.
    try {
      read_safetensors(path);
    } catch (const InputError& e) {
      const std::string said = without_json_exception_ids(e.what());
      CHECK_THAT(said, Catch::Contains("unreadable safetensors header: parse error at line 1"));
      CHECK_THAT(said, !Catch::Contains("json.exception"));
    }
  }
  SECTION("dtype loom does not read") {
    refused(file_of(R"({"a":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}})", four_floats), "I32");
  }
  SECTION("byte range does not match the shape") {
    refused(file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four_floats), "'a'");
  }
  SECTION("byte range past the end of the file") {
    refused(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[4,20]}})", four_floats), "'a'");
  }
  SECTION("data cut short") {
    refused(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four_floats.substr(0, 10)), "'a'");
  }
  SECTION("offsets that are not sizes, or that leave bytes of the data to no tensor") {
    // A negative offset, read as unsigned, wrapped round into the header (its bytes loaded as weights).
    refused(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]}})", four_floats),
            "data_offsets [-16,0], not two byte offsets");
    refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four_floats),
            "bytes no tensor holds before tensor 'a'");
    refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four_floats),
            "its tensors hold 8 bytes of data, the file 16");
    // A length field one byte short: the header's last byte read as data, every tensor shifted.
    const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}} )";
    refused(little_endian(header.size() - 1, 8) + header + four_floats,
            "its tensors hold 16 bytes of data, the file 17");
  }
  SECTION("entry without a shape") {
    refused(file_of(R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", four_floats), "'a'");
  }
  SECTION("two tensors over the same bytes") {
    refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    four_floats),
            "tensor 'b' has a byte range that overlaps tensor 'a'");
  }
  SECTION("a negative or overflowing shape") {
    refused(file_of(R"({"a":{"dtype":"F32","shape":[-1,-4],"data_offsets":[0,16]}})", four_floats), "'a'");
    refused(file_of(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", four_floats),
            "'a' has a shape larger than the file");
  }
  SECTION("tensors side by side are read") {
    write_bytes(path, file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                              four_floats));
    const auto tensors = read_safetensors(path);
    CHECK(tensors.at("b")[1].item<float>() == 4.0f);
    // An empty tensor holds no bytes: it overlaps nothing, wherever its range sits.
    write_bytes(path, file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("z":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                              four_floats));
    CHECK(read_safetensors(path).at("z").numel() == 0);
  }
  fs::remove_all(dir);
}
