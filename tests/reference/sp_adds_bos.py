"""Whether transformers starts a prompt with BOS for a SentencePiece tokenizer.model, under the
tokenizer_config.json files loom might find beside it: none, one naming only the class
(LlamaTokenizer), and add_bos_token true or false beside the class.

Usage: sp_adds_bos.py MODEL OUTDIR. Writes OUTDIR/CASE/ for each case: a tiny random Llama
(config.json, model.safetensors, sized to the model's vocabulary), MODEL as tokenizer.model and the
case's tokenizer_config.json, for `loom generate OUTDIR/CASE`; prints one line per case: "CASE yes"
when LlamaTokenizer's ids of a prompt start with BOS, else "CASE no".
"""
import json
import os
import shutil
import sys

# transformers reads the model's protobuf through a copy of sentencepiece's schema that the C++
# protobuf runtime refuses as a duplicate of sentencepiece's own; the Python runtime takes both.
os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"

import sentencepiece  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer  # noqa: E402

model_file, outdir = sys.argv[1], sys.argv[2]
processor = sentencepiece.SentencePieceProcessor(model_file=model_file)
bos_id = processor.bos_id()
assert bos_id >= 0, "the model needs a BOS piece"

configs = {"none": None, "llama_class": {"tokenizer_class": "LlamaTokenizer"},
           "true": {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True},
           "false": {"tokenizer_class": "LlamaTokenizer", "add_bos_token": False}}

model_dir = os.path.join(outdir, "model")
LlamaForCausalLM(LlamaConfig(vocab_size=processor.get_piece_size(), hidden_size=16, intermediate_size=32,
                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                             max_position_embeddings=64, tie_word_embeddings=True)).save_pretrained(model_dir)
for case, config in configs.items():
    directory = os.path.join(outdir, case)
    shutil.copytree(model_dir, directory)
    shutil.copyfile(model_file, os.path.join(directory, "tokenizer.model"))
    if config is not None:
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
    ids = LlamaTokenizer.from_pretrained(directory)("hello world")["input_ids"]
    print(case, "yes" if ids[0] == bos_id else "no")
