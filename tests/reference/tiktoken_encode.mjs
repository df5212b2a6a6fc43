// js-tiktoken's real GPT-2 and cl100k encodings, as a reference for loom's byte-level BPE.
// Usage: node tiktoken_encode.mjs NAME export DIR     writes DIR/tokenizer.json from NAME's ranks
//        node tiktoken_encode.mjs NAME encode DOCS.jsonl   one JSON array of ids per document
// The export turns ranks into merges as transformers' tiktoken converter does: every split
// of a token into two tokens is a merge, ranked by the token's own rank, so that the lowest
// ranked merge is the one tiktoken would apply.
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { Tiktoken } from "js-tiktoken/lite";
import gpt2 from "js-tiktoken/ranks/gpt2";
import cl100k from "js-tiktoken/ranks/cl100k_base";

const [name, action, path] = process.argv.slice(2);
const ranks = { gpt2, cl100k_base: cl100k }[name];
const encoding = new Tiktoken(ranks);

if (action === "encode") {
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (line.trim() === "") continue;
    console.log(JSON.stringify(encoding.encode(JSON.parse(line).text, "all")));
  }
} else {
  // GPT-2's bytes_to_unicode.
  const symbol = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    symbol.push(String.fromCodePoint(printable ? b : 256 + extra++));
  }
  const tokens = [...encoding.textMap.entries()].map(([rank, bytes]) => [rank, Array.from(bytes)]);
  const vocab = {};
  for (const [rank, bytes] of tokens) vocab[bytes.map((b) => symbol[b]).join("")] = rank;
  const merges = [];
  for (const [rank, bytes] of tokens) {
    if (bytes.length < 2) continue;
    const local = [];
    for (let i = 1; i < bytes.length; i++) {
      const a = encoding.rankMap.get(bytes.slice(0, i).join(","));
      const b = encoding.rankMap.get(bytes.slice(i).join(","));
      if (a !== undefined && b !== undefined) local.push([a, b, bytes.slice(0, i), bytes.slice(i)]);
    }
    local.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
    for (const [, , l, r] of local) merges.push([rank, l.map((b) => symbol[b]).join(""), r.map((b) => symbol[b]).join("")]);
  }
  merges.sort((x, y) => x[0] - y[0]);
  const added = Object.entries(ranks.special_tokens).map(([content, id]) => ({
    id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  const json = {
    version: "1.0", added_tokens: added, normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: ranks.pat_str }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: null, decoder: { type: "ByteLevel" },
    model: { type: "BPE", ignore_merges: true, vocab, merges: merges.map(([, l, r]) => [l, r]) },
  };
  mkdirSync(path, { recursive: true });
  writeFileSync(`${path}/tokenizer.json`, JSON.stringify(json));
}
