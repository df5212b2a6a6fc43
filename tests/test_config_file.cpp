// What a config file may hold: one YAML document of sections whose keys are plain names, each
// written once.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "core/errors.h"
#include "test_helpers.h"

using loom::test::write_temp_yaml;

TEST_CASE("an empty, comment-only or several-document config file is refused naming the file", "[config]") {
  for (const std::string text : {"", "# nothing but a comment\n", "\n\n"}) {
    const auto path = write_temp_yaml(text);
    CHECK_THROWS_WITH(loom::load_config(path), Catch::Contains(path) && Catch::Contains("is empty"));
  }
  CHECK_THROWS_WITH(loom::load_config("/dev/null"), Catch::Contains("'/dev/null' is empty"));
  const auto two = write_temp_yaml("model:\n  num_layers: 2\n---\ntrain:\n  steps: 5\n");
  CHECK_THROWS_WITH(loom::load_config(two), Catch::Contains(two) && Catch::Contains("holds 2 YAML documents"));
  const auto one = write_temp_yaml("---\nmodel:\n  num_layers: 2\n---\n");  // a trailing --- starts no document
  CHECK(loom::load_config(one).model.num_layers == 2);
}

TEST_CASE("keys that name nothing, and anything written twice, are refused naming it", "[config]") {
  auto check = [](const std::string& yaml, const std::string& expected) {
    const auto path = write_temp_yaml(yaml);
    CHECK_THROWS_WITH(loom::load_config(path), Catch::Contains(path) && Catch::Contains(expected));
  };
  // YAML allows a mapping or a list as a key; yaml-cpp's conversion of one to a name failed with its own words.
  check("model:\n  num_layers: 2\n? {a: 1}\n: 3\n", "a key at the top at line 3 is a YAML mapping");
  check("train:\n  ? [a, b]\n  : 3\n", "a key in 'train' at line 2 is a YAML list");
  // yaml-cpp keeps both of two equal keys: a section or mapping written twice would merge without a word.
  check("train:\n  steps: 3\nmodel:\n  num_layers: 2\ntrain:\n  lr: 0.1\n", "section 'train' appears twice");
  check("model:\n  moe: {top_k: 1}\n  moe: {every: 1}\n", "'model.moe' appears twice");
  check("train:\n  steps: 3\n  steps: 4\n", "key 'train.steps' appears twice");
  check("model.num_layers: 3\n", "'model.num_layers' is written as one name at the top; a file nests it");
}
