#!/usr/bin/env python3
"""Anchor: Gigatoken (https://github.com/marcelroed/gigatoken, Rust through
its Python binding), the fastest HF-exact BPE tokenizer we know of, on one
thread: the field's best, beside HF tokenizers (hf_tokenize.py), for the
tokenize rows of issue 31.

  python gigatoken_tokenize.py --tokenizer DIR_OR_tokenizer.json [--out FILE|-|none] [--bench-line] [--batch N] IN.jsonl

Input: JSONL, one {"text": "..."} per line (split on "\\n" only), as
hf_tokenize.py reads it.
Output: JSONL, one {"ids": [...]} per input text, same order, to --out FILE
  (default "-", stdout; none: only the count is kept). The ids are those of
  HF's Tokenizer.encode(text) with add_special_tokens=True: Gigatoken's own
  API (encode_batch) encodes the text alone, and this script puts the
  tokenizer.json post-processor's special tokens (TemplateProcessing's
  "single", as Llama-3.1's <|begin_of_text|>) around each row while it
  writes it, outside the timed call.
--bench-line      after the output, print one line
                  {"bench": {"load_s", "warmup_s", "read_s", "encode_s",
                  "lines", "bytes", "tokens", "encode_mb_per_s",
                  "tokens_per_s", "threads", "encode_cpu_s"}} on stdout.
                  encode_s is the time in encode_batch alone (MB = 1e6 bytes
                  of UTF-8 text), as hf_tokenize.py's; load_s is the import
                  and gigatoken.Tokenizer(tokenizer.json).
--batch N         texts per encode_batch call (default 0: the whole input in
                  one call). Calls of hf_tokenize.py's 1,024 texts cost
                  Gigatoken ~1.3 ms each beyond one call over the whole
                  input: 136 MB/s where one call reads 234 (Qwen2.5, 2 AMD
                  EPYC vCPUs, 2026-12-07), so the anchor takes one call,
                  as ferry's side encodes the input in one pass.

Cold, on one thread: encode_batch(parallel=False) encodes on the calling
thread, never on Gigatoken's thread pool. Its pre-token cache starts from
the vocabulary (every vocab word is seeded) and grows over the input, as
ferry's does; the first call of a process also builds that state, so one
call on a short text that is not in the input (warmup_s, reported apart,
like load_s) comes before the timed ones. Without it the first batch
carries the build: 57-80 MB/s where the same pass reads ~200 after it (2
AMD EPYC vCPUs, 2026-12-07).

Setup: scripts/setup-bench-deps installs gigatoken (and awkward, which its
encode_batch returns) into $FERRY_CACHE/bench-anchors, laid over the test
venv by PYTHONPATH, pinned in bench/requirements.lock.
"""

import json
import os
import sys
import time

from hf_tokenize import ids_line, read_texts  # the same input and output lines


def parse_args(argv):
    """The flags of the module docstring; argparse exits 2 on a bad command line."""
    import argparse

    ap = argparse.ArgumentParser(prog="gigatoken_tokenize", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json or the directory that holds it")
    ap.add_argument("--bench-line", action="store_true")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--out", default="-")
    ap.add_argument("input", metavar="IN.jsonl")
    o = ap.parse_args(argv)
    if o.batch < 0:
        ap.error("--batch must be 0 or a positive integer")
    if os.path.isdir(o.tokenizer):
        o.tokenizer = os.path.join(o.tokenizer, "tokenizer.json")
    return o


def single_template(path):
    """The ids the tokenizer's post-processor puts before and after a single
    sequence (TemplateProcessing's "single", found in a Sequence too); a
    post-processor of another kind that adds tokens (BertProcessing,
    RobertaProcessing) is refused, not guessed."""
    with open(path, encoding="utf-8") as f:
        pp = json.load(f).get("post_processor")
    procs = pp.get("processors", []) if pp and pp.get("type") == "Sequence" else [pp]
    before, after = [], []
    for p in procs:
        if not p or p.get("type") == "ByteLevel":
            continue
        if p.get("type") != "TemplateProcessing":
            raise SystemExit(f"gigatoken_tokenize: {path}: post-processor {p.get('type')} is not supported")
        side = before
        for piece in p["single"]:
            if "Sequence" in piece:
                side = after
            else:
                side.extend(p["special_tokens"][piece["SpecialToken"]["id"]]["ids"])
    return before, after


def main(argv):
    o = parse_args(argv)
    t0 = time.perf_counter()
    import gigatoken as gt
    import numpy as np

    tok = gt.Tokenizer(o.tokenizer)
    t1 = time.perf_counter()
    tok.encode_batch(["A warm-up, not in the input: 12 x."], parallel=False)
    t2 = time.perf_counter()
    texts = read_texts(o.input, "gigatoken_tokenize")
    before, after = single_template(o.tokenizer)
    t3 = time.perf_counter()
    nbytes = sum(len(t.encode("utf-8")) for t in texts)

    out = None if o.out == "none" else sys.stdout if o.out == "-" else open(o.out, "w", encoding="utf-8")
    step = o.batch or max(1, len(texts))
    tokens, encode_s, encode_cpu = 0, 0.0, 0.0
    for i in range(0, len(texts), step):
        batch = texts[i:i + step]
        s0, c0 = time.perf_counter(), time.process_time()
        rows = tok.encode_batch(batch, parallel=False)
        encode_s += time.perf_counter() - s0
        encode_cpu += time.process_time() - c0
        lists = [np.asarray(r).tolist() for r in rows]
        tokens += sum(len(ids) for ids in lists) + len(lists) * (len(before) + len(after))
        if out is not None:
            out.write("".join(ids_line(before + ids + after) for ids in lists))
    if out is not None and out is not sys.stdout:
        out.close()
    if o.bench_line:
        sys.stdout.write(json.dumps({"bench": {
            "load_s": round(t1 - t0, 4), "warmup_s": round(t2 - t1, 4), "read_s": round(t3 - t2, 4),
            "encode_s": round(encode_s, 4), "lines": len(texts), "bytes": nbytes, "tokens": tokens,
            "encode_mb_per_s": round(nbytes / encode_s / 1e6, 3) if encode_s > 0 else 0,
            "tokens_per_s": round(tokens / encode_s) if encode_s > 0 else 0,
            "threads": 1, "encode_cpu_s": round(encode_cpu, 4),
        }}, separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
