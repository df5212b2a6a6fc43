"""The reference ids of a tokenizer.json: Hugging Face's `tokenizers` (the Rust library).

Usage: hf_encode.py DIR DOCS.jsonl. Prints one JSON array of ids per document, without the
special tokens a post-processor would add (loom prepare adds BOS/EOD only when asked).
"""
import json
import sys

from tokenizers import Tokenizer

directory, docs = sys.argv[1], sys.argv[2]
tokenizer = Tokenizer.from_file(f"{directory}/tokenizer.json")
with open(docs, encoding="utf-8") as f:
    for line in f:
        if line.strip():
            print(json.dumps(tokenizer.encode(json.loads(line)["text"], add_special_tokens=False).ids))
