#!/usr/bin/env python3
"""Builds small synthetic tokenizer.json files that exercise what the Qwen2.5
and Llama-3.1 fixtures do not: the GPT-2 regex (ByteLevel use_regex=true) with
add_prefix_space, NFKC, added tokens with lstrip/rstrip/single_word/normalized,
a post-processor that adds BOS and EOS, array-form merges, and a Split regex
that no hand-written scanner knows (the regexp2 fallback).

The vocabulary is the 256 byte tokens of Qwen2.5 plus the results of its first
MERGES merges, renumbered. Run from the repository root:
  python3 tokenize/testdata/make-synthetic.py /tmp/qwen2.5/tokenizer.json tokenize/testdata/synthetic
then make the goldens with HF tokenizers (see README.txt there).
"""
import json, os, sys

MERGES = 6000

src, out = sys.argv[1], sys.argv[2]
q = json.load(open(src, encoding='utf-8'))
vocab = q['model']['vocab']
by_id = sorted(vocab.items(), key=lambda kv: kv[1])
keep = [t for t, i in by_id[:256]]
have = set(keep)
merges = []
for m in q['model']['merges']:
    a, b = m.split(' ') if isinstance(m, str) else m
    if a in have and b in have and a + b in vocab:
        merges.append([a, b])
        if a + b not in have:
            have.add(a + b)
            keep.append(a + b)
    if len(merges) >= MERGES:
        break
new_vocab = {t: i for i, t in enumerate(keep)}
n = len(new_vocab)

def added(i, content, special, lstrip=False, rstrip=False, single_word=False, normalized=False):
    return {"id": n + i, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}

added_tokens = [
    added(0, "<|bos|>", True),
    added(1, "<|eos|>", True),
    added(2, "<mask>", True, lstrip=True),
    added(3, "[R]", False, rstrip=True),
    added(4, "word", False, single_word=True),
    added(5, "ﬁx", False, normalized=True),          # NFKC: "fix"
    added(6, "<|long|>", True),
    added(7, "<|long|>>", False),                    # longest match wins
]

def template(bos, eos):
    sp = {"<|bos|>": {"id": "<|bos|>", "ids": [n], "tokens": ["<|bos|>"]},
          "<|eos|>": {"id": "<|eos|>", "ids": [n + 1], "tokens": ["<|eos|>"]}}
    single = [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}] if bos else []
    single.append({"Sequence": {"id": "A", "type_id": 0}})
    if eos:
        single.append({"SpecialToken": {"id": "<|eos|>", "type_id": 0}})
    return {"type": "TemplateProcessing", "single": single, "pair": single + [{"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": sp}

base = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens}
model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": new_vocab, "merges": merges}

gpt2 = dict(base)
gpt2.update({
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "post_processor": template(True, True),
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": dict(model, merges=[a + " " + b for a, b in merges]),
})

regex = dict(base)
regex.update({
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
    "post_processor": template(False, True),
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "model": dict(model, ignore_merges=True),
})

for name, tj in (("gpt2", gpt2), ("regex", regex)):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
print(n, "vocab,", len(merges), "merges")
