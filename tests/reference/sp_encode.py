"""SentencePiece reference ids: trains a tiny model, then encodes documents with it.

Usage: sp_encode.py train TEXT MODEL_PREFIX TYPE VOCAB   (TYPE: bpe or unigram)
       sp_encode.py encode MODEL DOCS.jsonl              (one JSON array per document)
Encoding adds no BOS or EOS, as loom's SentencePiece tokenizer does.
"""
import json
import sys

import sentencepiece as spm


def main():
    if sys.argv[1] == "train":
        text, prefix, model_type, vocab = sys.argv[2:6]
        spm.SentencePieceTrainer.train(input=text, model_prefix=prefix, model_type=model_type,
                                       vocab_size=int(vocab), character_coverage=1.0, hard_vocab_limit=False,
                                       num_threads=1, minloglevel=2)
    else:
        processor = spm.SentencePieceProcessor(model_file=sys.argv[2])
        with open(sys.argv[3], encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    print(json.dumps(processor.encode(json.loads(line)["text"])))


if __name__ == "__main__":
    main()
