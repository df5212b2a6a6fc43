#include "core/hf_bpe_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/byte_level.h"
#include "core/errors.h"
#include "core/hf_pre_tokenizer.h"
#include "core/logging.h"
#include "core/tokenizer_config.h"

namespace loom {

namespace {

// Enough for every frequent word of a corpus; rare long tails are recomputed rather than kept forever.
constexpr size_t kCacheWords = 500000;
constexpr size_t kCacheWordBytes = 256;

// The code point of UTF-8 TEXT starting at AT (-1 past the end or on a bad sequence); LENGTH gets
// its bytes.
utf8proc_int32_t code_point_at(const std::string& text, size_t at, size_t* length = nullptr) {
  utf8proc_int32_t c = -1;
  const utf8proc_ssize_t read = at >= text.size()
                                    ? 0
                                    : utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                                       static_cast<utf8proc_ssize_t>(text.size() - at), &c);
  if (length != nullptr) *length = read > 0 ? static_cast<size_t>(read) : 1;
  return read > 0 ? c : -1;
}
// Where the code point ending just before AT starts.
size_t code_point_start_before(const std::string& text, size_t at) {
  size_t start = at - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;  // back to the lead byte
  return start;
}

// Unicode's White_Space, which lstrip and rstrip absorb in Hugging Face's tokenizers (Rust's
// char::is_whitespace): not only ASCII's, also no-break and ideographic spaces.
bool is_white_space(utf8proc_int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// NFC needs the text whole (combining marks reorder), so it is applied before pre-tokenization.
// (By length, not to the first NUL: a document may hold U+0000, which the library keeps.)
std::string nfc(const std::string& text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) throw InputError("the text is not valid UTF-8 (the NFC normalizer cannot read it)");
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(length));
  std::free(out);
  return result;
}

// Whether the code point of UTF-8 TEXT starting at AT is a word character as Hugging Face's
// single_word test has it: regex \w (letters, marks, decimal and letter numbers, connector
// punctuation such as '_', and the zero-width joiners).
bool word_character_at(const std::string& text, size_t at) {
  const utf8proc_int32_t c = code_point_at(text, at);
  if (c < 0) return false;
  // (The joiners, and the circled, squared and negative circled letters: symbols Unicode counts as alphabetic.)
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
      (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
  }
}
bool word_character_before(const std::string& text, size_t at) {
  return at > 0 && word_character_at(text, code_point_start_before(text, at));
}

// Whether encoding a prompt the way Hugging Face's tokenizer does puts BOS (BOS_TOKEN) first: the
// tokenizer.json's post-processor says (a TemplateProcessing, alone or in a Sequence, whose single
// template starts with it). GPT-2's has a BOS token it never adds; Llama 3's template adds
// <|begin_of_text|>. transformers 5 reads nothing else for a tokenizer.json: tokenizer_config.json's
// add_bos_token and tokenizer_class (LlamaTokenizer) change no id (tried with 5.17, in
// tests/reference/hf_adds_bos.py).
bool template_starts_with(const nlohmann::json& processor, const std::string& bos_token) {
  if (!processor.is_object()) return false;
  if (processor.value("type", std::string()) == "Sequence" && processor.contains("processors")) {
    for (const auto& step : processor["processors"])
      if (template_starts_with(step, bos_token)) return true;
    return false;
  }
  if (processor.value("type", std::string()) != "TemplateProcessing" || !processor.contains("single") ||
      !processor["single"].is_array() || processor["single"].empty())
    return false;
  const auto& first = processor["single"][0];
  return first.is_object() && first.contains("SpecialToken") &&
         first["SpecialToken"].value("id", std::string()) == bos_token;
}

bool parse_normalizer(const nlohmann::json& config, const std::string& where) {
  if (config.is_null()) return false;
  const std::string type = config.value("type", std::string());
  if (type == "NFC") return true;
  if (type == "Sequence") {
    bool any = false;
    for (const auto& step : config.at("normalizers")) any = parse_normalizer(step, where) || any;
    return any;
  }
  throw InputError(where + ": normalizer type '" + type + "' is not supported (supported: none, NFC)");
}

}  // namespace

HfBpeTokenizer::HfBpeTokenizer(const std::string& path) : path_(path) {
  const nlohmann::json json = read_tokenizer_file(path);
  const std::string where = "tokenizer file '" + path + "'";
  try {
    if (!json.is_object() || !json.contains("model")) throw InputError(where + " has no key 'model'");
    const auto& model = json.at("model");
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") {
      throw InputError(where + ": model.type '" + type + "' is not supported (only byte-level BPE)");
    }
    if (model.value("byte_fallback", false)) {
      throw InputError(where +
                       ": model.byte_fallback is set: this is a SentencePiece-style BPE, not byte-level; "
                       "give the tokenizer.model file instead");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty())
        throw InputError(where + ": model." + key + " is not supported");
    }
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0)
      throw InputError(where + ": model.dropout is not supported (tokenization must be deterministic)");
    ignore_merges_ = model.value("ignore_merges", false);

    if (!model.contains("vocab") || !model["vocab"].is_object())
      throw InputError(where + " has no object 'model.vocab'");
    for (const auto& [token, id] : model["vocab"].items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        throw InputError(where + ": model.vocab['" + token + "'] is not a non-negative integer");
      vocab_[token] = id.get<int64_t>();
    }
    if (json.contains("added_tokens") && json["added_tokens"].is_array()) {
      // Ids as the library gives them reading the file, in list order: a token already in the
      // vocabulary (or added before) keeps that id, another takes the next past model.vocab and
      // the added tokens before it. The "id" beside it is not read: written otherwise (a gap, or
      // another token's id), the library renumbers it with a warning, and so does loom.
      std::unordered_map<std::string, int64_t> added_ids;
      const auto model_size = static_cast<int64_t>(vocab_.size());
      int64_t largest = -1;
      std::string renumbered;
      for (const auto& token : json["added_tokens"]) {
        const bool special = token.value("special", false);
        const auto content = token.at("content").get<std::string>();
        if (content.empty()) continue;  // (the library passes it over: it matches nothing and takes no id)
        int64_t id = 0;
        if (const auto added = added_ids.find(content); added != added_ids.end()) {
          id = added->second;
        } else if (const auto known = vocab_.find(content); known != vocab_.end()) {
          id = known->second;
        } else {
          id = largest < 0 ? model_size : (largest >= model_size || model_size == 0 ? largest + 1 : model_size);
        }
        added_ids[content] = id;
        largest = std::max(largest, id);
        if (token.contains("id") && token["id"].is_number_integer() && token["id"].get<int64_t>() != id &&
            renumbered.size() < 300) {
          renumbered += (renumbered.empty() ? "" : ", ") + std::string("'") + content + "' written as " +
                        std::to_string(token["id"].get<int64_t>()) + " is " + std::to_string(id);
          // A vocabulary with gaps can give the next id to a token of its own: both then encode to it.
          for (const auto& [other, other_id] : vocab_)
            if (other_id == id && other != content) renumbered += " (model.vocab's '" + other + "' too)";
        }
        // (The library writes "normalized" always; absent, it is what its own default would be.)
        auto& set = token.value("normalized", !special) ? normalized_added_ : raw_added_;
        set.tokens.push_back({content, id, token.value("lstrip", false), token.value("rstrip", false),
                              token.value("single_word", false)});
      }
      if (!renumbered.empty())
        warn0("{}: added tokens numbered as the tokenizers library numbers them, not by their \"id\": {}", where,
              renumbered);
    }
    for (const auto& [token, id] : vocab_) vocab_size_ = std::max(vocab_size_, id + 1);
    for (const auto* set : {&raw_added_, &normalized_added_})
      for (const auto& token : set->tokens) vocab_size_ = std::max(vocab_size_, token.id + 1);
    // The id table is as long as the largest id: one id far past the entries (a damaged file) would
    // allocate gigabytes, or fail to, for ids no token has.
    const auto entries =
        static_cast<int64_t>(vocab_.size() + raw_added_.tokens.size() + normalized_added_.tokens.size());
    if (vocab_size_ > 2 * entries + (int64_t{1} << 20)) {  // (a million spare ids: some 40 MB)
      throw InputError(where + ": its largest id is " + std::to_string(vocab_size_ - 1) + ", far past its " +
                       std::to_string(entries) + " tokens (a damaged file?); ids run from 0 to about the token count");
    }
    tokens_.assign(vocab_size_, "");
    is_added_.assign(vocab_size_, false);
    for (const auto& [token, id] : vocab_) tokens_[id] = token;
    for (const auto* set : {&raw_added_, &normalized_added_}) {
      for (const auto& token : set->tokens) {
        tokens_[token.id] = token.content;  // (decoded as given)
        is_added_[token.id] = true;
      }
    }
    // The library normalizes a normalized token's content too: it is matched in normalized text.
    nfc_ = parse_normalizer(json.value("normalizer", nlohmann::json()), where);
    if (nfc_)
      for (auto& token : normalized_added_.tokens) token.content = nfc(token.content);
    for (auto* set : {&raw_added_, &normalized_added_}) {
      auto& tokens = set->tokens;
      // Leftmost-longest matching: at a position, the longest added token wins.
      std::stable_sort(tokens.begin(), tokens.end(),
                       [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
      tokens.erase(std::remove_if(tokens.begin(), tokens.end(), [](const AddedToken& t) { return t.content.empty(); }),
                   tokens.end());
      for (const auto& token : tokens) set->starts[static_cast<unsigned char>(token.content[0])] = true;
    }

    for (int b = 0; b < 256; ++b) {
      if (!vocab_.count(byte_level::symbol(static_cast<unsigned char>(b))))
        throw InputError(where + ": model.vocab lacks the byte-level symbol of byte " + std::to_string(b) + " ('" +
                         byte_level::symbol(static_cast<unsigned char>(b)) + "'): not a byte-level BPE vocabulary");
    }
    if (!model.contains("merges") || !model["merges"].is_array())
      throw InputError(where + " has no array 'model.merges'");
    int64_t rank = 0;
    for (const auto& entry : model["merges"]) {
      std::string left, right;
      if (entry.is_string()) {
        const std::string text = entry.get<std::string>();
        const size_t space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
          throw InputError(where + ": merge " + std::to_string(rank) + " '" + text + "' is not two tokens");
        left = text.substr(0, space);
        right = text.substr(space + 1);
      } else if (entry.is_array() && entry.size() == 2) {
        left = entry[0].get<std::string>();
        right = entry[1].get<std::string>();
      } else {
        throw InputError(where + ": merge " + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
      }
      const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
      if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end())
        throw InputError(where + ": merge " + std::to_string(rank) + " ('" + left + "', '" + right +
                         "') names a token that is not in model.vocab");
      // The last of duplicate merges gives the rank, as in the Rust library (its map is collected
      // from the list in order, each later pair overwriting).
      merges_.insert_or_assign((static_cast<uint64_t>(l->second) << 32) | static_cast<uint64_t>(r->second),
                               Merge{rank, m->second});
      ++rank;
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto unk = vocab_.find(model["unk_token"].get<std::string>());
      if (unk != vocab_.end()) unk_id_ = unk->second;
    }
    pre_tokenizer_ = std::make_unique<HfPreTokenizer>(json.value("pre_tokenizer", nlohmann::json()), where);
    if (!pre_tokenizer_->byte_level())
      throw InputError(where + ": the pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer");
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + " is not a tokenizer.json loom can read: " + e.what());
  }
  const nlohmann::json config = special_tokens_beside(path_);
  bos_id_ = special_id(config, "bos_token", {"<|begin_of_text|>", "<s>", "<|startoftext|>"});
  eos_id_ = special_id(config, "eos_token", {"<|end_of_text|>", "<|endoftext|>", "</s>"});
  adds_bos_ = bos_id_ >= 0 && template_starts_with(json.value("post_processor", nlohmann::json()),
                                                   tokens_[static_cast<size_t>(bos_id_)]);
}

HfBpeTokenizer::~HfBpeTokenizer() = default;

int64_t HfBpeTokenizer::special_id(const nlohmann::json& config, const std::string& config_key,
                                   const std::vector<std::string>& conventions) const {
  auto id_of = [&](const std::string& token) -> int64_t {
    for (const auto* set : {&raw_added_, &normalized_added_})
      for (const auto& added : set->tokens)
        if (added.content == token) return added.id;
    const auto found = vocab_.find(token);
    return found == vocab_.end() ? -1 : found->second;
  };
  if (config.contains(config_key)) {
    const auto& value = config[config_key];
    std::string token;
    if (value.is_string()) token = value.get<std::string>();
    if (value.is_object() && value.contains("content") && value["content"].is_string())
      token = value["content"].get<std::string>();
    if (!token.empty() && id_of(token) >= 0) return id_of(token);
  }
  for (const auto& token : conventions)
    if (id_of(token) >= 0) return id_of(token);
  return -1;
}

std::vector<int64_t> HfBpeTokenizer::merge(const std::string& word) const {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(byte_level::utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    const auto found = vocab_.find(word.substr(i, n));
    // Every byte's symbol is in the vocabulary (checked on load); other characters cannot occur.
    ids.push_back(found != vocab_.end() ? found->second : unk_id_);
    i += n;
  }
  // The lowest-ranked pair merges first, the leftmost among equals (as the Rust library does), with a heap
  // so that a long word (a base64 blob, a run of one character) costs n log n rather than n squared.
  struct Symbol {
    int64_t id;
    int64_t prev, next;  // -1: none
    bool alive;
  };
  struct Candidate {
    int64_t rank, position, merged;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::vector<Symbol> symbols(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    symbols[i] = {ids[i], static_cast<int64_t>(i) - 1, i + 1 < ids.size() ? static_cast<int64_t>(i + 1) : -1, true};
  }
  auto pair_merge = [&](int64_t left) -> const Merge* {
    const int64_t right = symbols[left].next;
    if (right < 0) return nullptr;
    const auto found =
        merges_.find((static_cast<uint64_t>(symbols[left].id) << 32) | static_cast<uint64_t>(symbols[right].id));
    return found == merges_.end() ? nullptr : &found->second;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(symbols.size()); ++i) {
    if (const Merge* m = pair_merge(i)) queue.push({m->rank, i, m->merged});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    // A candidate is stale when either symbol has since merged into something else.
    if (!symbols[top.position].alive) continue;
    const Merge* current = pair_merge(top.position);
    if (current == nullptr || current->merged != top.merged || current->rank != top.rank) continue;
    Symbol& left = symbols[top.position];
    Symbol& right = symbols[left.next];
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.position;
    if (left.prev >= 0) {
      if (const Merge* m = pair_merge(left.prev)) queue.push({m->rank, left.prev, m->merged});
    }
    if (const Merge* m = pair_merge(top.position)) queue.push({m->rank, top.position, m->merged});
  }
  ids.clear();
  for (int64_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  return ids;
}

void HfBpeTokenizer::encode_word(const std::string& word, std::vector<int64_t>& ids) const {
  if (ignore_merges_) {
    const auto whole = vocab_.find(word);
    if (whole != vocab_.end()) {
      ids.push_back(whole->second);
      return;
    }
  }
  {
    std::shared_lock lock(cache_mutex_);
    const auto found = cache_.find(word);
    if (found != cache_.end()) {
      ids.insert(ids.end(), found->second.begin(), found->second.end());
      return;
    }
  }
  std::vector<int64_t> merged = merge(word);
  ids.insert(ids.end(), merged.begin(), merged.end());
  if (word.size() <= kCacheWordBytes) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheWords) cache_.emplace(word, std::move(merged));
  }
}

void HfBpeTokenizer::encode_plain(const std::string& text, std::vector<int64_t>& ids) const {
  if (text.empty()) return;
  for (const auto& piece : pre_tokenizer_->split(text)) encode_word(byte_level::encode(piece), ids);
}

void HfBpeTokenizer::split_at_added(const std::string& text, const AddedTokenSet& set, std::vector<int64_t>& ids,
                                    const std::function<void(const std::string&)>& plain) {
  size_t plain_begin = 0;
  for (size_t at = 0; at < text.size();) {
    const AddedToken* match = nullptr;
    if (set.starts[static_cast<unsigned char>(text[at])]) {
      for (const auto& token : set.tokens) {
        if (text.compare(at, token.content.size(), token.content) == 0) {
          match = &token;
          break;
        }
      }
    }
    if (match == nullptr) {
      ++at;
      continue;
    }
    const size_t end = at + match->content.size();
    // A single-word token inside a word is not one: a word character on either side vetoes it. The
    // library's matches do not overlap, so the text the vetoed one covered is not searched again
    // ("ab" vetoed in "xabc" leaves no "bc" to find).
    if (match->single_word && (word_character_before(text, at) || word_character_at(text, end))) {
      at = end;
      continue;
    }
    size_t start = at, next = end;
    // (Only whole code points ending at START: a stray continuation byte stops it, kept as text.)
    while (match->lstrip && start > plain_begin) {
      const size_t before = code_point_start_before(text, start);
      size_t length = 0;
      if (before < plain_begin || !is_white_space(code_point_at(text, before, &length)) || before + length != start)
        break;
      start = before;
    }
    if (match->rstrip) {
      size_t length = 1;
      while (next < text.size() && is_white_space(code_point_at(text, next, &length))) next += length;
    }
    if (start > plain_begin) plain(text.substr(plain_begin, start - plain_begin));
    ids.push_back(match->id);
    // The library finds its matches first and strips after: the search goes on where the token
    // ended, so an added token inside the whitespace rstrip took is still matched ("[R]\n" with
    // "\n" added gives both), and the text after it starts where that one ends.
    plain_begin = next;
    at = end;
  }
  if (plain_begin < text.size()) plain(text.substr(plain_begin));
}

std::vector<int64_t> HfBpeTokenizer::encode(const std::string& text) const {
  // The library takes text (a Python str): bytes that are no UTF-8 have no ids there. The regex and
  // NFC refuse them too, but a pre-tokenizer without either would byte-encode them without a word.
  for (utf8proc_ssize_t at = 0, size = static_cast<utf8proc_ssize_t>(text.size()); at < size;) {
    utf8proc_int32_t c = 0;
    const auto length = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at), size - at, &c);
    if (length <= 0) throw InputError("the text is not valid UTF-8 (at byte " + std::to_string(at) + ")");
    at += length;
  }
  std::vector<int64_t> ids;
  split_at_added(text, raw_added_, ids, [&](const std::string& raw) {
    split_at_added(nfc_ ? nfc(raw) : raw, normalized_added_, ids,
                   [&](const std::string& normalized) { encode_plain(normalized, ids); });
  });
  return ids;
}

std::string HfBpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text, pending;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (is_added_[id]) {
      text += byte_level::decode(pending) + tokens_[id];
      pending.clear();
    } else {
      pending += tokens_[id];
    }
  }
  return text + byte_level::decode(pending);
}

}  // namespace loom
