"""Whether transformers starts a prompt with BOS, for tokenizer.json files that differ in the ways
loom might read: the post-processor (none, or Llama 3's template with BOS first) and
tokenizer_config.json (as written, add_bos_token false or true, tokenizer_class LlamaTokenizer).

Usage: hf_adds_bos.py TOKENIZER_DIR OUTDIR. TOKENIZER_DIR holds a byte-level tokenizer.json with
<|begin_of_text|> and a tokenizer_config.json naming it bos_token (train_bpe.py's llama3). Writes
OUTDIR/CASE/ for each case: a tiny random Llama (config.json, model.safetensors, sized to the
vocabulary) and the case's tokenizer files, for `loom generate OUTDIR/CASE`; prints one line per
case: "CASE yes" when AutoTokenizer's ids of a prompt start with BOS, else "CASE no".
"""
import copy
import json
import os
import shutil
import sys

from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

source, outdir = sys.argv[1], sys.argv[2]
with open(os.path.join(source, "tokenizer.json"), encoding="utf-8") as f:
    tokenizer_json = json.load(f)
with open(os.path.join(source, "tokenizer_config.json"), encoding="utf-8") as f:
    tokenizer_config = json.load(f)
bos = tokenizer_config["bos_token"]
bos_id = next(t["id"] for t in tokenizer_json["added_tokens"] if t["content"] == bos)
vocab = 1 + max(list(tokenizer_json["model"]["vocab"].values()) + [t["id"] for t in tokenizer_json["added_tokens"]])

template = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
processors = {"none": None,
              "template": {"type": "Sequence", "processors": [
                  {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
                  template]}}
configs = {"plain": {}, "false": {"add_bos_token": False}, "true": {"add_bos_token": True},
           "llama_class": {"tokenizer_class": "LlamaTokenizer"}}

model_dir = os.path.join(outdir, "model")
LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                             max_position_embeddings=64, tie_word_embeddings=True)).save_pretrained(model_dir)
for processor_name, processor in processors.items():
    for config_name, extra in configs.items():
        case = f"{processor_name}_{config_name}"
        directory = os.path.join(outdir, case)
        shutil.copytree(model_dir, directory)
        tokenizer = copy.deepcopy(tokenizer_json)
        tokenizer["post_processor"] = processor
        with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False)
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({**tokenizer_config, **extra}, f)
        ids = AutoTokenizer.from_pretrained(directory)("hello world")["input_ids"]
        print(case, "yes" if ids[0] == bos_id else "no")
