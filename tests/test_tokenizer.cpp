#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/byte_level.h"
#include "core/errors.h"
#include "core/pcre2_regex.h"
#include "core/tokenizer.h"
#include "test_helpers.h"

using namespace loom;
using Catch::Matchers::Contains;

namespace {

// A byte-level BPE small enough to work out by hand: ids 0-255 are the bytes' symbols
// (so a byte's id is its value), then the merges' results, then one special token.
nlohmann::json tiny_bpe() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::symbol(static_cast<unsigned char>(b))] = b;
  const std::string space = byte_level::symbol(' ');  // "Ġ"
  vocab["he"] = 256;
  vocab[space + "t"] = 257;
  vocab[space + "the"] = 258;
  vocab["ll"] = 259;
  vocab["llo"] = 260;
  vocab["<|endoftext|>"] = 261;  // as GPT-2's: in the vocabulary and added (which keeps the vocabulary's id)
  vocab[space + "zz"] = 262;     // no merge makes it: only ignore_merges reaches it
  vocab["34"] = 263;
  nlohmann::json merges = {"h e", "l l", space + " t", nlohmann::json::array({space + "t", "he"}), "ll o", "3 4"};
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 261}, {"content", "<|endoftext|>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& spec) {
  try {
    load_tokenizer(spec);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("the byte tokenizer: each byte is its id, decode inverts encode", "[tokenizer]") {
  const auto tokenizer = load_tokenizer("byte");
  const std::string text = "a\tb\n\xC3\xA9\xF0\x9F\x98\x80";  // tab, newline, é, an emoji
  const auto ids = tokenizer->encode(text);
  CHECK(ids == std::vector<int64_t>{'a', '\t', 'b', '\n', 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80});
  CHECK(tokenizer->decode(ids) == text);
  CHECK(tokenizer->eos_id() == 256);
  CHECK(tokenizer->bos_id() == -1);
  CHECK(tokenizer->vocab_size() == 257);
}

TEST_CASE("byte-level BPE: merges by rank, pre-tokens, added tokens, decode", "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_bpe");
  const std::string path = write(dir, "tokenizer.json", tiny_bpe().dump());
  const auto tokenizer = load_tokenizer(dir);  // the directory holding tokenizer.json
  CHECK(tokenizer->kind() == "hf-bpe");
  CHECK(tokenizer->vocab_size() == 264);
  CHECK(tokenizer->eos_id() == 261);  // <|endoftext|> by convention
  CHECK(tokenizer->bos_id() == -1);
  // "hello" -> he l l o -> he ll o -> he llo; " the" -> Ġ t he -> Ġt he -> Ġthe; the special token
  // cuts the text; "hell" -> he ll.
  const std::string text = "hello the<|endoftext|>hell";
  const auto ids = tokenizer->encode(text);
  CHECK(ids == std::vector<int64_t>{256, 260, 258, 261, 256, 259});
  CHECK(tokenizer->decode(ids) == text);
  // GPT-2's regex: "'s" is its own word, digits run together (so "3 4" merges), two spaces
  // before a word split as " " + " word" (\s+(?!\S)).
  CHECK(tokenizer->encode("it's 12345") == std::vector<int64_t>{'i', 't', '\'', 's', ' ', '1', '2', 263, '5'});
  CHECK(tokenizer->encode("a  he") == std::vector<int64_t>{'a', ' ', ' ', 256});
  CHECK(tokenizer->encode("") == std::vector<int64_t>{});
  // A long word merges left to right: 10001 l's are 5000 "ll" and one "l".
  std::vector<int64_t> run(5000, 259);
  run.push_back('l');
  CHECK(tokenizer->encode(std::string(10001, 'l')) == run);
  // Without ignore_merges, " zz" is bytes even though "Ġzz" is in the vocabulary.
  CHECK(tokenizer->encode(" zz") == std::vector<int64_t>{' ', 'z', 'z'});
}

TEST_CASE("byte-level BPE: ignore_merges, a Llama-3-style Split, tokenizer_config's specials", "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_llama3");
  auto json = tiny_bpe();
  json["model"]["ignore_merges"] = true;
  json["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", R"((?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  json["added_tokens"].push_back({{"id", 264}, {"content", "<|begin|>"}, {"special", true}});
  write(dir, "tokenizer.json", json.dump());
  write(dir, "tokenizer_config.json", R"({"bos_token": "<|begin|>", "eos_token": {"content": "<|endoftext|>"}})");
  const auto tokenizer = load_tokenizer(dir + "/tokenizer.json");
  CHECK(tokenizer->bos_id() == 264);
  CHECK(tokenizer->eos_id() == 261);
  CHECK(tokenizer->encode(" zz") == std::vector<int64_t>{262});  // a whole vocabulary entry
  // \p{N}{1,3} cuts "12345" into "123" and "45": the "3 4" merge cannot apply.
  CHECK(tokenizer->encode("12345") == std::vector<int64_t>{'1', '2', '3', '4', '5'});
  CHECK(tokenizer->encode("<|begin|>he") == std::vector<int64_t>{264, 256});
  // special_tokens_map.json beside it names the special tokens over tokenizer_config.json's, as
  // transformers 5.17 reads the pair (its eos_token wins where both name one).
  write(dir, "special_tokens_map.json", R"({"eos_token": {"content": "<|begin|>", "lstrip": false}})");
  CHECK(load_tokenizer(dir + "/tokenizer.json")->eos_id() == 264);
  CHECK(load_tokenizer(dir + "/tokenizer.json")->bos_id() == 264);
}

TEST_CASE("tokenizer specs and files that cannot be used are InputErrors naming them", "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_errors");
  CHECK_THAT(error_of("gpt9"), Contains("'gpt9'") && Contains("SentencePiece") && Contains("tokenizer.json"));
  CHECK_THAT(error_of(dir + "/missing.model"), Contains("missing.model") && Contains("no such file"));
  CHECK_THAT(error_of(dir), Contains("with neither tokenizer.json nor tokenizer.model"));
  CHECK_THAT(error_of(write(dir, "broken.json", "{\"model\": ")),
             Contains("broken.json") && Contains("not valid JSON"));
  CHECK_THAT(error_of(write(dir, "garbage.model", "not a model")),
             Contains("garbage.model") && Contains("SentencePiece"));
  auto json = tiny_bpe();
  json["normalizer"] = {{"type", "Lowercase"}};
  CHECK_THAT(error_of(write(dir, "lower.json", json.dump())), Contains("lower.json") && Contains("'Lowercase'"));
  json = tiny_bpe();
  json["model"]["merges"].push_back("q nope");
  CHECK_THAT(error_of(write(dir, "merge.json", json.dump())), Contains("merge 6") && Contains("not in model.vocab"));
  json = tiny_bpe();
  json["pre_tokenizer"] = {{"type", "Metaspace"}};
  CHECK_THAT(error_of(write(dir, "meta.json", json.dump())), Contains("'Metaspace'"));
  json = tiny_bpe();
  json["model"]["vocab"].erase(byte_level::symbol(0));
  CHECK_THAT(error_of(write(dir, "bytes.json", json.dump())), Contains("byte 0"));
  // One id far past the tokens: its id table would take gigabytes (2^27 ids: 4.3 GB).
  json = tiny_bpe();
  json["model"]["vocab"]["far"] = int64_t{1} << 27;
  CHECK_THAT(error_of(write(dir, "far.json", json.dump())),
             Contains("far.json") && Contains("its largest id is 134217728, far past its 266 tokens"));
  // A pattern that backtracks without end on a text gives up naming itself, not LibTorch or PCRE2 alone.
  json = tiny_bpe();
  json["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Split"}, {"pattern", {{"Regex", "(a*)*b"}}}, {"behavior", "Isolated"}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const auto backtracking = load_tokenizer(write(dir, "backtracking.json", json.dump()));
  CHECK_THROWS_WITH(backtracking->encode(std::string(3000, 'a') + "cb"),
                    Contains("backtracking.json") && Contains("the regex '(a*)*b' gave up matching"));
}

TEST_CASE("byte-level BPE refuses text that is not UTF-8 with an InputError", "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_utf8");
  write(dir, "tokenizer.json", tiny_bpe().dump());
  const auto tokenizer = load_tokenizer(dir);
  CHECK_THROWS_WITH(tokenizer->encode("ab\xFF"), Contains("UTF-8"));
  // Without a regex (ByteLevel's use_regex false, no Split) too: nothing else would read the text.
  auto plain = tiny_bpe();
  plain["pre_tokenizer"]["use_regex"] = false;
  write(dir, "tokenizer.json", plain.dump());
  CHECK(load_tokenizer(dir)->encode("ab") == std::vector<int64_t>{97, 98});
  CHECK_THROWS_WITH(load_tokenizer(dir)->encode("ab \xFF cd"), Contains("not valid UTF-8 (at byte 3)"));
}

// tests/reference/tiny_unigram.model: python3-sentencepiece trained it (unigram, 300 pieces, identity
// normalization) on tests/reference/texts.jsonl and the README; the ids below are its Python encoding.
TEST_CASE("SentencePiece: a model file's ids, specials and decode", "[tokenizer]") {
  const auto tokenizer = load_tokenizer(std::string(LOOM_SOURCE_DIR) + "/tests/reference/tiny_unigram.model");
  CHECK(tokenizer->kind() == "sentencepiece");
  CHECK(tokenizer->vocab_size() == 300);
  CHECK(tokenizer->bos_id() == 1);
  CHECK(tokenizer->eos_id() == 2);
  const std::string text = "the caf\xC3\xA9 model 42";
  const auto ids = tokenizer->encode(text);
  CHECK(ids == std::vector<int64_t>{16, 65, 9, 32, 259, 121, 3, 66, 55});
  CHECK(tokenizer->decode(ids) == text);
  CHECK(tokenizer->encode("").empty());
}

TEST_CASE("byte-level BPE: a prompt starts with BOS only where Hugging Face's tokenizer adds it", "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_adds_bos");
  auto json = tiny_bpe();
  json["added_tokens"].push_back({{"id", 264}, {"content", "<|begin|>"}, {"special", true}});
  const auto adds_bos = [&](const nlohmann::json& post_processor, const std::string& config) {
    json["post_processor"] = post_processor;
    write(dir, "tokenizer.json", json.dump());
    write(dir, "tokenizer_config.json", config);
    return load_tokenizer(dir)->adds_bos();
  };
  const std::string bos = R"("bos_token": "<|begin|>")";
  // The post-processor alone decides, as in transformers 5 (tokenizers.sh checks loom generate
  // against AutoTokenizer): add_bos_token and tokenizer_class change nothing.
  CHECK_FALSE(adds_bos(nullptr, "{" + bos + "}"));  // GPT-2's: a BOS token, no template adding it
  CHECK_FALSE(adds_bos(nullptr, "{" + bos + R"(, "add_bos_token": false})"));
  CHECK_FALSE(adds_bos(nullptr, "{" + bos + R"(, "add_bos_token": true})"));
  CHECK_FALSE(adds_bos(nullptr, "{" + bos + R"(, "tokenizer_class": "LlamaTokenizerFast"})"));
  const nlohmann::json llama3 = {
      // Llama 3's post-processor: ByteLevel, then a template with BOS first
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "TemplateProcessing"},
         {"single", {{{"SpecialToken", {{"id", "<|begin|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}}}}}}}}}};
  CHECK(adds_bos(llama3, "{" + bos + "}"));
  CHECK(adds_bos(llama3, "{" + bos + R"(, "add_bos_token": false})"));
}

// As transformers 5.17's LlamaTokenizer (tests/scripts/tokenizers.sh compares the two).
TEST_CASE("SentencePiece: a prompt starts with BOS only where tokenizer_config.json says add_bos_token true",
          "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_sp_adds_bos");
  std::filesystem::copy_file(std::string(LOOM_SOURCE_DIR) + "/tests/reference/tiny_unigram.model",
                             dir + "/tokenizer.model");
  const auto adds_bos = [&] { return load_tokenizer(dir + "/tokenizer.model")->adds_bos(); };
  CHECK_FALSE(adds_bos());  // nothing beside it
  write(dir, "tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer"})");
  CHECK_FALSE(adds_bos());
  write(dir, "tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": true})");
  CHECK(adds_bos());
  write(dir, "tokenizer_config.json", R"({"add_bos_token": false})");
  CHECK_FALSE(adds_bos());
  write(dir, "tokenizer_config.json", "not json");
  CHECK_FALSE(adds_bos());  // not this tokenizer's business
}

TEST_CASE("byte-level BPE: a single_word added token matches only between non-word characters", "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_single_word");
  auto json = tiny_bpe();
  json["added_tokens"].push_back({{"id", 264}, {"content", "eh"}, {"single_word", true}, {"special", false}});
  write(dir, "tokenizer.json", json.dump());
  const auto tokenizer = load_tokenizer(dir);
  // (Checked against Hugging Face's tokenizers: letters, digits and '_' on either side veto it.)
  CHECK(tokenizer->encode("eh") == std::vector<int64_t>{264});
  CHECK(tokenizer->encode("eh!") == std::vector<int64_t>{264, '!'});
  CHECK(tokenizer->encode("ehll") == std::vector<int64_t>{'e', 'h', 259});
  CHECK(tokenizer->encode("_eh") == std::vector<int64_t>{'_', 'e', 'h'});
  CHECK(tokenizer->encode("\xc3\xa9"
                          "eh") == std::vector<int64_t>{0xc3, 0xa9, 'e', 'h'});
}

TEST_CASE("byte-level BPE: lstrip takes whole whitespace code points only, and NFC keeps a NUL", "[tokenizer]") {
  const std::string dir = test::temp_dir("tokenizer_lstrip_bytes");
  auto json = tiny_bpe();
  json["added_tokens"].push_back({{"id", 264}, {"content", "[L]"}, {"lstrip", true}, {"special", false}});
  write(dir, "tokenizer.json", json.dump());
  const auto tokenizer = load_tokenizer(dir);
  CHECK(tokenizer->encode("A  [L]") == std::vector<int64_t>{'A', 264});
  // A stray continuation byte before the spaces is text, not a space to strip: it stays in the text
  // before the token, which is refused as not UTF-8 (it was dropped without a word).
  CHECK_THROWS_WITH(tokenizer->encode("A \x80 [L]"), Catch::Contains("not valid UTF-8"));
  // NFC by length: what follows a NUL is still there.
  json["normalizer"] = {{"type", "NFC"}};
  write(dir, "tokenizer.json", json.dump());
  const std::string nul("a\0b", 3);
  CHECK(load_tokenizer(dir)->encode(nul) == std::vector<int64_t>{'a', 0, 'b'});
}

TEST_CASE("a pre-tokenizer regex means what Oniguruma (Hugging Face's tokenizers) reads in it", "[tokenizer]") {
  // Each split as tokenizers 0.23 splits it (its ids compared in tests/scripts/tokenizers.sh).
  const auto pieces = [](const std::string& pattern, const std::string& text) {
    std::vector<std::string> out;
    for (const auto& [begin, end] : Pcre2Regex(pattern, "test").find_all(text))
      out.push_back(text.substr(begin, end - begin));
    return out;
  };
  using Pieces = std::vector<std::string>;
  // U+180E is no whitespace (PCRE2's \s held it): GPT-2's ' ?\p{L}+' gets no space of its own.
  CHECK(pieces(R"(\s+)", " \u180ea") == Pieces{" "});
  CHECK(pieces(R"(\S+)", "a\u180eb c") == Pieces{"a\u180eb", "c"});
  CHECK(pieces(R"([^\s\p{L}]+)", "\u180e!") == Pieces{"\u180e!"});
  // \w holds marks (e + U+0301) and not a superscript digit; \b and \B follow it; \h is a hex digit.
  CHECK(pieces(R"(\w+)", "e\u0301! x\u00b2y") == Pieces{"e\u0301", "x", "y"});
  CHECK(pieces(R"(\b)", "ab c\u0301") == Pieces{"", "", "", ""});
  CHECK(pieces(R"(\h+)", "ab cd 0x1F") == Pieces{"ab", "cd", "0", "1F"});
  // \v is the vertical tab alone (not a newline); \uHHHH a code point.
  CHECK(pieces(R"(\v)", "a\x0b\nb") == Pieces{"\x0b"});
  CHECK(pieces(R"(\u0041+)", "AAb") == Pieces{"AA"});
  // ^ and $ match at every line, not only at the text's ends; Oniguruma's (?m) is a dot that takes a newline.
  CHECK(pieces("^.", "a\nb") == Pieces{"a", "b"});
  CHECK(pieces(R"(\s+$)", "a \nb ") == Pieces{" ", " "});
  CHECK(pieces("(?m)a.b", "a\nb") == Pieces{"a\nb"});
  // What loom cannot reproduce is refused, naming the construct, not split otherwise.
  CHECK_THROWS_WITH(Pcre2Regex("[[:alpha:]]+", "tokenizer.json"), Catch::Contains("a POSIX class"));
  CHECK_THROWS_WITH(Pcre2Regex("[a-z&&[^aeiou]]", "tokenizer.json"), Catch::Contains("class intersection"));
  CHECK_THROWS_WITH(Pcre2Regex("[a[bc]]", "tokenizer.json"), Catch::Contains("nested class"));
  CHECK_THROWS_WITH(Pcre2Regex(R"([\W])", "tokenizer.json"), Catch::Contains("\\W inside a character class"));
}
