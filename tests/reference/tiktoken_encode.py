"""The reference ids of an OpenAI encoding: tiktoken itself, built offline from the ranks.

Usage: tiktoken_encode.py RANKS.tiktoken DOCS.jsonl. RANKS.json beside the ranks gives the split
regex (pat_str) and the special tokens. Prints one JSON array of ids per document; special
tokens in the text are encoded as such (allowed_special="all"), as loom matches added tokens.
"""
import json
import pathlib
import sys

import tiktoken
import tiktoken.load

ranks, docs = pathlib.Path(sys.argv[1]), sys.argv[2]
spec = json.loads(ranks.with_suffix(".json").read_text())
encoding = tiktoken.Encoding(ranks.stem, pat_str=spec["pat_str"],
                             mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(ranks)),
                             special_tokens=spec["special_tokens"])
with open(docs, encoding="utf-8") as f:
    for line in f:
        if line.strip():
            print(json.dumps(encoding.encode(json.loads(line)["text"], allowed_special="all")))
