#!/usr/bin/env python3
"""Writes what HF tokenizers' decode gives back for the corpus, where it is
not the line itself: one {"line": N, "special": B, "text": "..."} per such
line (N from 1), for decode(encode(x, add_special_tokens=B),
skip_special_tokens=not B). Lines whose decode is the line are left out.

  python make-decode-goldens.py TOKENIZER_DIR corpus-dev.jsonl > OUT.jsonl
"""
import json
import sys

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
for special in (False, True):
    encs = tok.encode_batch(texts, add_special_tokens=special)
    outs = tok.decode_batch([e.ids for e in encs], skip_special_tokens=special)
    for i, (x, y) in enumerate(zip(texts, outs)):
        if x != y:
            print(json.dumps({"line": i + 1, "special": special, "text": y}, ensure_ascii=False, separators=(",", ":")))
