#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/errors.h"
#include "core/indexed_dataset.h"
#include "core/token_corpus.h"
#include "test_helpers.h"

using namespace loom;

namespace {

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
T field_at(const std::vector<char>& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

}  // namespace

TEST_CASE("the writer produces Megatron-LM's MMIDIDX layout byte for byte", "[data]") {
  const std::string prefix = test::temp_dir("idx") + "/ds";
  IndexedDatasetWriter writer(prefix, TokenDtype::u16);
  writer.add_document({1, 2, 3});
  writer.add_document({65535, 7});
  writer.finish();

  const auto idx = slurp(prefix + ".idx");
  REQUIRE(idx.size() == 9 + 8 + 1 + 8 + 8 + 2 * 4 + 2 * 8 + 3 * 8);
  CHECK(std::memcmp(idx.data(), "MMIDIDX\0\0", 9) == 0);
  CHECK(field_at<uint64_t>(idx, 9) == 1);   // version
  CHECK(field_at<uint8_t>(idx, 17) == 8);   // dtype code of uint16
  CHECK(field_at<uint64_t>(idx, 18) == 2);  // sequences
  CHECK(field_at<uint64_t>(idx, 26) == 3);  // document index entries: 0, 1, 2
  CHECK(field_at<int32_t>(idx, 34) == 3);   // lengths
  CHECK(field_at<int32_t>(idx, 38) == 2);
  CHECK(field_at<int64_t>(idx, 42) == 0);  // byte offsets
  CHECK(field_at<int64_t>(idx, 50) == 6);
  CHECK(field_at<int64_t>(idx, 58) == 0);  // document index
  CHECK(field_at<int64_t>(idx, 66) == 1);
  CHECK(field_at<int64_t>(idx, 74) == 2);
  const auto bin = slurp(prefix + ".bin");
  REQUIRE(bin.size() == 10);
  CHECK(field_at<uint16_t>(bin, 6) == 65535);

  IndexedDataset reader(prefix);
  CHECK(reader.dtype() == TokenDtype::u16);
  CHECK(reader.num_sequences() == 2);
  CHECK(reader.document_index() == std::vector<int64_t>{0, 1, 2});
  std::vector<int64_t> tokens(2);
  reader.read(1, 0, 2, tokens.data());
  CHECK(tokens == std::vector<int64_t>{65535, 7});
}

TEST_CASE("every integer dtype round-trips", "[data]") {
  for (auto dtype :
       {TokenDtype::u8, TokenDtype::i8, TokenDtype::i16, TokenDtype::u16, TokenDtype::i32, TokenDtype::i64}) {
    const std::string prefix = test::temp_dir("dtype") + "/ds";
    IndexedDatasetWriter writer(prefix, dtype);
    writer.add_document({0, 5, 100, 127});
    writer.finish();
    IndexedDataset reader(prefix);
    std::vector<int64_t> tokens(4);
    reader.read(0, 0, 4, tokens.data());
    CHECK(tokens == std::vector<int64_t>{0, 5, 100, 127});
  }
}

TEST_CASE("the corpus concatenates documents and reads across their boundaries", "[data]") {
  const std::string prefix = test::temp_dir("corpus") + "/ds";
  IndexedDatasetWriter writer(prefix, TokenDtype::i32);
  writer.add_document({0, 1, 2});
  writer.add_document({3});
  writer.add_document({4, 5, 6, 7});
  writer.finish();
  IndexedCorpus corpus(prefix);
  CHECK(corpus.num_tokens() == 8);
  std::vector<int64_t> tokens(6);
  corpus.read(1, 6, tokens.data());
  CHECK(tokens == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("broken datasets are refused naming the file", "[data]") {
  const std::string dir = test::temp_dir("broken");
  CHECK_THROWS_WITH(IndexedDataset(dir + "/missing"), Catch::Contains(dir + "/missing.idx"));
  // A FIFO where the tokens should be: opening it would wait for a writer, however long.
  {
    IndexedDatasetWriter fifo(dir + "/fifo", TokenDtype::u16);
    fifo.add_document({1, 2});
    fifo.finish();
    std::filesystem::remove(dir + "/fifo.bin");
    REQUIRE(::mkfifo((dir + "/fifo.bin").c_str(), 0600) == 0);
    CHECK_THROWS_WITH(IndexedDataset(dir + "/fifo"), Catch::Contains("fifo.bin' is not a regular file"));
  }

  IndexedDatasetWriter writer(dir + "/ds", TokenDtype::u16);
  writer.add_document({1, 2, 3, 4});
  writer.finish();
  std::filesystem::resize_file(dir + "/ds.bin", 4);
  CHECK_THROWS_WITH(IndexedDataset(dir + "/ds"),
                    Catch::Contains("ds.bin") && Catch::Contains("does not match its index"));

  // An empty dataset (as Megatron-LM writes one: no sequence, the document index's leading 0) is
  // refused as empty, not taken for the multimodal layout its 42 bytes also fit.
  {
    IndexedDatasetWriter empty(dir + "/empty", TokenDtype::u16);
    empty.finish();
  }
  CHECK(std::filesystem::file_size(dir + "/empty.idx") == 42);
  CHECK_THROWS_WITH(IndexedDataset(dir + "/empty"), Catch::Contains("empty.idx' holds no sequences"));
  // The writer says whose fault a failed write is: a full disk is the machine's (exit 75).
  std::filesystem::create_symlink("/dev/full", dir + "/full.bin.tmp");
  {
    IndexedDatasetWriter full(dir + "/full", TokenDtype::u16);
    const std::vector<int64_t> large(1 << 20, 7);  // beyond the stream's buffer: the write itself fails
    try {
      full.add_document(large);
      FAIL("a write to /dev/full succeeded");
    } catch (const EnvironmentError& e) {
      CHECK_THAT(e.what(), Catch::Contains("full.bin.tmp': No space left on device"));
    }
  }
  CHECK_THROWS_AS(IndexedDatasetWriter(dir + "/no/such/folder/ds", TokenDtype::u16), InputError);

  std::ofstream(dir + "/bad.idx") << "NOTMAGIC!xxxxxxxxxxxxxxxx";
  std::ofstream(dir + "/bad.bin") << "";
  CHECK_THROWS_WITH(IndexedDataset(dir + "/bad"), Catch::Contains("bad magic"));

  std::filesystem::copy_file(dir + "/ds.idx", dir + "/cut.idx");
  std::filesystem::resize_file(dir + "/cut.idx", 30);
  std::ofstream(dir + "/cut.bin") << "";
  CHECK_THROWS_WITH(IndexedDataset(dir + "/cut"), Catch::Contains("truncated"));

  // A header claiming 2^61 sequences is refused before anything is allocated for them.
  std::filesystem::copy_file(dir + "/ds.idx", dir + "/huge.idx");
  std::filesystem::copy_file(dir + "/ds.bin", dir + "/huge.bin");
  {
    std::fstream f(dir + "/huge.idx", std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t claimed = uint64_t{1} << 61;
    f.seekp(9 + 8 + 1);  // magic, version, dtype code: then the sequence count
    f.write(reinterpret_cast<const char*>(&claimed), 8);
  }
  CHECK_THROWS_WITH(IndexedDataset(dir + "/huge"), Catch::Contains("huge.idx") && Catch::Contains("do not fit"));

  // A document index entry outside the sequences (data.split reads by it) or falling, and a
  // sequence at an offset that is not a whole token: refused when the index is read.
  IndexedDatasetWriter three(dir + "/three", TokenDtype::u16);
  for (int d = 0; d < 3; ++d) three.add_document({1, 2, 3});
  three.finish();
  const auto size = std::filesystem::file_size(dir + "/three.idx");
  auto damaged = [&](const std::string& name, uint64_t at, int64_t value) {
    std::filesystem::copy_file(dir + "/three.idx", dir + "/" + name + ".idx");
    std::filesystem::copy_file(dir + "/three.bin", dir + "/" + name + ".bin");
    std::fstream f(dir + "/" + name + ".idx", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&value), 8);
    return dir + "/" + name;
  };
  const uint64_t last_document = size - 8, first_offset = 9 + 8 + 1 + 8 + 8 + 3 * 4;
  CHECK_THROWS_WITH(IndexedDataset(damaged("far", last_document, 1000000)),
                    Catch::Contains("far.idx") && Catch::Contains("document index entry 3 = 1000000 is outside"));
  CHECK_THROWS_WITH(IndexedDataset(damaged("negative", last_document, -5)), Catch::Contains("= -5 is outside"));
  CHECK_THROWS_WITH(IndexedDataset(damaged("odd", first_offset, 1)),
                    Catch::Contains("odd.bin") && Catch::Contains("sequence 0 at byte 1"));
  // Inside the file but not end to end (sequence 1 read over sequence 0's tokens), and a document
  // index that does not start at 0 or end at the sequence count: refused, not trained on.
  CHECK_THROWS_WITH(
      IndexedDataset(damaged("overlap", first_offset + 8, 0)),
      Catch::Contains("overlap.idx': sequence 1 starts at byte 0, not where the sequence before it ends (6)"));
  const uint64_t first_document = first_offset + 3 * 8;
  CHECK_THROWS_WITH(IndexedDataset(damaged("late_start", first_document, 1)),
                    Catch::Contains("the document index runs from 1 to 3, not from 0"));
  CHECK_THROWS_WITH(IndexedDataset(damaged("short_end", last_document, 2)),
                    Catch::Contains("the document index runs from 0 to 2, not from 0 to the sequence count 3"));
}
