"""Indexed datasets written by Megatron-LM's own code (megatron-core's IndexedDatasetBuilder).

Usage:
  megatron_datasets.py tokens TEXTS.jsonl PREFIX TOKENIZER [--append-eod]
      One sequence per document, as Megatron-LM's tools/preprocess_data.py writes without
      --split-sentences: TOKENIZER is `byte` (each UTF-8 byte its id, 256 the end of a document)
      or a tokenizer.json, whose ids the `tokenizers` library gives without special tokens; the
      token type is the one preprocess_data picks for the vocabulary (DType.optimal_dtype).
      Empty documents are left out, as loom prepare leaves them.
  megatron_datasets.py sentences PREFIX KIND
      The texts of `sentence_texts` below as byte ids, each document split into its sentences (one
      sequence each, as preprocess_data --split-sentences writes them). KIND: `documents`
      (int32), `gaps` (uint16, with documents that hold no sequence and sequences of no tokens, as
      preprocess_data writes for empty texts and sentences), or `each` (every sentence a document
      of its own, the control: a split may then cut between a document's sentences).
  megatron_datasets.py texts TEXTS.jsonl
      Writes `sentence_texts` as JSON lines (the same documents, whole, for loom prepare).
  megatron_datasets.py multimodal PREFIX
      A multimodal index (a mode byte per sequence after the document index).
Several commands separated by `+` run in one process (megatron.core takes seconds to import).
"""
import json
import sys
import warnings

warnings.filterwarnings("ignore")  # megatron.core's import warns that Transformer Engine and Apex are absent

import numpy as np  # noqa: E402
import torch  # noqa: E402
from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder  # noqa: E402

BYTE_VOCAB, BYTE_EOD = 257, 256


def sentence_texts():
    # Documents of one to five sentences, of unequal lengths, so that a split's cut can fall
    # inside a document of several sentences.
    texts = []
    for i in range(120):
        sentences = [f"Document {i}."] + [f"Sentence {j} of {i} has w{(i * j) % 37}." for j in range(i % 5)]
        texts.append(" ".join(sentences))
    return texts


def sentences_of(text):
    # Each sentence keeps the blank after it, so that the sentences concatenate to the text.
    parts = text.replace(". ", ". \n").split("\n")
    return [p.encode() for p in parts]


def finish(builder, prefix):
    builder.finalize(prefix + ".idx")
    dataset = IndexedDataset(prefix)  # Megatron's reader takes what its writer wrote
    print(f"{prefix}: {len(dataset)} sequences, {len(dataset.document_indices) - 1} documents")


def write_tokens(texts_path, prefix, tokenizer_path, append_eod):
    if tokenizer_path == "byte":
        vocab, eod = BYTE_VOCAB, BYTE_EOD
        encode = lambda text: list(text.encode())  # noqa: E731
    else:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(tokenizer_path)
        vocab = tokenizer.get_vocab_size()
        eod = tokenizer.token_to_id("<|endoftext|>")
        encode = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(vocab))
    with open(texts_path) as f:
        for line in f:
            ids = encode(json.loads(line)["text"])
            if not ids:
                continue
            if append_eod:
                ids.append(eod)
            builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)])
    finish(builder, prefix)


def write_sentences(prefix, kind):
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.int32 if kind == "documents" else np.uint16)
    for i, text in enumerate(sentence_texts()):
        parts = sentences_of(text)
        if kind == "each":
            for p in parts:
                builder.add_document(torch.tensor(list(p), dtype=torch.int64), [len(p)])
            continue
        if kind == "gaps":
            if i % 7 == 3:
                builder.add_document(torch.tensor([], dtype=torch.int64), [])
            if i % 5 == 1:
                parts.insert(1, b"")
        ids = [b for p in parts for b in p]
        builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(p) for p in parts])
    finish(builder, prefix)


def write_multimodal(prefix):
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16, multimodal=True)
    for i in range(50):
        builder.add_document(torch.tensor([65 + (i + j) % 26 for j in range(40)]), [20, 20], modes=[0, 0])
    builder.finalize(prefix + ".idx")


def run(command, args):
    if command == "tokens":
        write_tokens(args[0], args[1], args[2], "--append-eod" in args[3:])
    elif command == "sentences":
        write_sentences(args[0], args[1])
    elif command == "texts":
        with open(args[0], "w") as f:
            for text in sentence_texts():
                f.write(json.dumps({"text": text}) + "\n")
    elif command == "multimodal":
        write_multimodal(args[0])
    else:
        sys.exit(f"unknown command {command}")


def main():
    words = sys.argv[1:]
    while words:
        end = words.index("+") if "+" in words else len(words)
        run(words[0], words[1:end])
        words = words[end + 1 :]


if __name__ == "__main__":
    main()
