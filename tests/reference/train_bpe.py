"""Writes small byte-level BPE tokenizer.json files for tests/scripts/tokenizers.sh.

Learns MERGES merges from a text (counting adjacent symbol pairs over its words, as
BPE training does), then writes four variants that differ in what loom must get
right: GPT-2's ByteLevel regex with merges as "a b" strings; Llama 3's Split regex,
merges as [a, b] pairs and ignore_merges; SmolLM's Digits + ByteLevel with an NFC
normalizer; and "added": SmolLM's shape with added tokens of every kind (single_word,
lstrip, rstrip, normalized or not, overlapping one another). Usage: train_bpe.py TEXT
MERGES OUTDIR (writes OUTDIR/{gpt2,llama3,smollm,added}/).
"""
import collections
import json
import os
import re
import sys


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def learn(text, count):
    byte_chars = bytes_to_unicode()
    # An approximation of GPT-2's regex (Python's re has no \p{L}); any cut gives valid merges.
    words = collections.Counter(re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+", text))
    splits = {w: [byte_chars[b] for b in w.encode("utf-8")] for w in words}
    merges = []
    for _ in range(count):
        pairs = collections.Counter()
        for w, n in words.items():
            s = splits[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda item: (item[1], item[0]))
        merges.append((a, b))
        for w in words:
            s, out, i = splits[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            splits[w] = out
    vocab = {byte_chars[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def added(content, token_id, special=True, normalized=None, **flags):
    token = {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": not special if normalized is None else normalized, "special": special}
    token.update(flags)
    return token


# Added tokens that test the library's matching: the special ones cut the raw text before the
# normalizer runs ("x<" loses to "<|e|>"), a vetoed single_word match is passed over whole ("ab"
# in "xabc" leaves no "bc"), lstrip and rstrip take any Unicode whitespace, and a normalized
# token matches the NFC form of decomposed text ("café"), and a normalized token given decomposed
# ("résumé" in NFD) is normalized itself. A token already in the vocabulary keeps
# its id there, as the library's own files have it.
def tricky_added_tokens(vocab):
    tokens = [("<|endoftext|>", {}), ("<|e|>", {}), ("x<", dict(special=False)),
              ("ab", dict(special=False, single_word=True)), ("bc", dict(special=False)),
              ("[L]", dict(special=False, lstrip=True)), ("[R]", dict(special=False, normalized=False, rstrip=True)),
              ("the", dict(special=False, single_word=True)), ("cde", dict(special=False, single_word=True)),
              ("caf\u00e9", dict(special=False)), ("[B]", dict(special=False, lstrip=True, rstrip=True)),
              ("re\u0301sume\u0301", dict(special=False))]
    result, next_id = [], len(vocab)
    for content, flags in tokens:
        if content in vocab:
            result.append(added(content, vocab[content], **flags))
        else:
            result.append(added(content, next_id, **flags))
            next_id += 1
    return result


def main():
    text_path, count, outdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(text_path, encoding="utf-8") as f:
        vocab, merges = learn(f.read(), count)
    n = len(vocab)
    llama3_regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    variants = {
        "gpt2": ({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
                 None, [f"{a} {b}" for a, b in merges], False,
                 [added("<|endoftext|>", n)], {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}),
        "llama3": ({"type": "Sequence", "pretokenizers": [
                       {"type": "Split", "pattern": {"Regex": llama3_regex}, "behavior": "Isolated", "invert": False},
                       {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
                   None, [[a, b] for a, b in merges], True,
                   [added("<|begin_of_text|>", n), added("<|end_of_text|>", n + 1), added("<|endoftext|>", n + 2)],
                   {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
        "smollm": ({"type": "Sequence", "pretokenizers": [
                       {"type": "Digits", "individual_digits": True},
                       {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
                   {"type": "NFC"}, [f"{a} {b}" for a, b in merges], False,
                   [added("<|endoftext|>", 0 + n), added("<|im_start|>", n + 1)], None),
        "added": ({"type": "Sequence", "pretokenizers": [
                      {"type": "Digits", "individual_digits": True},
                      {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
                  {"type": "NFC"}, [f"{a} {b}" for a, b in merges], False, tricky_added_tokens(vocab), None),
    }
    for name, (pre, normalizer, merge_list, ignore, added_tokens, config) in variants.items():
        os.makedirs(os.path.join(outdir, name), exist_ok=True)
        tokenizer = {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": ignore, "vocab": vocab, "merges": merge_list},
        }
        with open(os.path.join(outdir, name, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False)
        if config is not None:
            with open(os.path.join(outdir, name, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f)


if __name__ == "__main__":
    main()
