// The reference ids of a tokenizer.json: Tokenizers.js (which reads the file as the
// Rust library does), one JSON array per line of DOCS.jsonl, without special tokens.
// Usage: node hf_encode.mjs DIR DOCS.jsonl
import { readFileSync, existsSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, docs] = process.argv.slice(2);
const json = JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8"));
const configPath = `${dir}/tokenizer_config.json`;
const config = existsSync(configPath) ? JSON.parse(readFileSync(configPath, "utf8")) : {};
const tokenizer = new Tokenizer(json, config);
for (const line of readFileSync(docs, "utf8").split("\n")) {
  if (line.trim() === "") continue;
  const { ids } = tokenizer.encode(JSON.parse(line).text, { add_special_tokens: false });
  console.log(JSON.stringify(ids));
}
