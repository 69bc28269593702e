#!/usr/bin/env python3
"""Anchor: Hugging Face ``tokenizers`` (the Rust library, through its Python
binding), the tokenizer transformers' AutoTokenizer uses; or, with
--transformers, ``transformers.AutoTokenizer`` itself, called once per text
as the seed workloads call it.

  python hf_tokenize.py --tokenizer DIR_OR_tokenizer.json [--no-special] [IN] > OUT.jsonl
  python hf_tokenize.py --tokenizer T --alpaca --eos '<|endoftext|>' \\
         --max-length 1024 --pad --out none --bench-line alpaca_data.json
  python hf_tokenize.py --tokenizer MODEL_DIR --transformers --alpaca \\
         --max-length 1024 --pad alpaca_data.json > rows.jsonl
  python hf_tokenize.py --tokenizer T --bench [--runs 5] [--warmup 1] IN.jsonl

Input (IN, or stdin when absent):
  default   JSONL, one {"text": "..."} per line (split on "\\n" only).
  --alpaca  Alpaca records, as a JSON array or JSON Lines, each with
            "instruction", "output" and optional "input", formatted as the
            seed workloads do:
              "### Instruction:\\n{instruction}\\n\\n"
              + "### Input:\\n{input}\\n\\n"            (only when input is non-empty)
              + "### Response:\\n{output}{eos}"       (eos from --eos)
Output: JSONL, one {"ids": [...]} per input text, same order, to --out FILE
  (default "-", stdout); --out none discards the IDs (only their count is
  kept), which makes this the fastest HF can go: tokenization alone.
--no-special      add_special_tokens=False (default True, like AutoTokenizer(text)).
--max-length N    truncation=True, max_length=N (the specials the
                  post-processor adds count against N, as in transformers).
--pad             with --max-length: padding="max_length", right side, pad
                  token --pad-token (default: the --eos token, as the seeds
                  set tokenizer.pad_token = tokenizer.eos_token).
--batch N         texts per encode_batch call (default 1024).
--bench-line      after the output, print one line
                  {"bench": {"load_s", "read_s", "encode_s", "lines", "bytes",
                  "tokens", "encode_mb_per_s", "tokens_per_s", "threads",
                  "encode_cpu_s"}} on stdout, where encode_s is the time spent
                  in encode_batch alone (not in converting IDs to Python lists
                  or writing them; MB = 1e6 bytes of UTF-8 text) and
                  encode_cpu_s the process CPU time in it (all threads: about
                  encode_s × the threads that really ran).
--bench           the original reference tool's mode: time encode_batch over
                  the whole input --runs times after --warmup; print one JSON
                  object (wall and CPU medians).
--transformers    instead of tokenizers.Tokenizer: T must be a model directory
                  (tokenizer.json + tokenizer_config.json); loads
                  transformers.AutoTokenizer.from_pretrained(T) (with
                  eos_token=--eos when given, as a base model's config has it),
                  sets pad_token = eos_token when it has none (as the seeds
                  do; --pad-token overrides), appends tokenizer.eos_token in
                  --alpaca mode, and calls
                    tokenizer(text, truncation=True, max_length=N, padding="max_length")
                  once per text (truncation/padding as --max-length/--pad say).
                  Output lines also carry "attention_mask". encode_s is the
                  time in those calls.
Threads: encode_batch runs on a rayon pool; RAYON_NUM_THREADS=N sets its size
  (default: one per CPU). TOKENIZERS_PARALLELISM=false would make it
  sequential whatever RAYON_NUM_THREADS says, so a false value together with
  RAYON_NUM_THREADS other than 1 is refused (exit 2) rather than measured
  silently on one thread.
Setup: the venv scripts/setup-test-deps builds (tokenizers, transformers).

Ported from bench/anchors/hf-tokenize.js (HF tokenizers' Node binding), itself
from ferry's reference tool hf-tokenize.js (Apache-2.0); output formats,
flags and exit statuses are the same.
"""

import json
import os
import statistics
import sys
import time

_FALSE = ("", "off", "false", "f", "no", "n", "0")  # tokenizers' get_parallelism()

USAGE = ("usage: python hf_tokenize.py --tokenizer T [--no-special] [--alpaca [--eos TOK]] "
         "[--max-length N [--pad] [--pad-token TOK]] [--transformers] [--out FILE|-|none] [--batch N] "
         "[--bench-line] [IN]\n")


def usage(msg):
    sys.stderr.write(f"hf_tokenize: {msg}\n{USAGE}")
    sys.exit(2)


def parse_args(argv):
    """The flags of the module docstring; a bad command line exits 2."""
    import argparse

    ap = argparse.ArgumentParser(prog="hf_tokenize", usage=USAGE.removeprefix("usage: ").rstrip("\n"),
                                 add_help=False)
    ap.add_argument("-h", "--help", action="store_true")
    ap.add_argument("--tokenizer")
    ap.add_argument("--no-special", dest="special", action="store_false")
    ap.add_argument("--special", dest="special", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-line", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--alpaca", action="store_true")
    ap.add_argument("--eos")
    ap.add_argument("--max-length", type=int, default=0)
    ap.add_argument("--pad", action="store_true")
    ap.add_argument("--pad-token")
    ap.add_argument("--out", default="-")
    ap.add_argument("--transformers", action="store_true")
    ap.add_argument("input", nargs="?")
    o = ap.parse_args(argv)
    if o.help:
        sys.stdout.write(__doc__)
        sys.exit(0)
    if not o.tokenizer:
        usage("--tokenizer is required")
    if o.alpaca and o.eos is None and not o.transformers:
        usage("--alpaca needs --eos (the seeds append tokenizer.eos_token)")
    if o.batch < 1:
        usage("--batch must be a positive integer")
    if o.max_length < 0:
        usage("--max-length must be a non-negative integer")
    if o.pad and o.max_length == 0:
        usage("--pad needs --max-length")
    if not o.transformers:
        if o.pad and o.pad_token is None:
            o.pad_token = o.eos
        if o.pad and o.pad_token is None:
            usage("--pad needs --pad-token or --eos")
    if o.transformers and o.bench:
        usage("--bench times encode_batch; --transformers calls the tokenizer per text (use --bench-line)")
    if o.transformers and not os.path.isdir(o.tokenizer):
        usage("--transformers needs a model directory (tokenizer.json + tokenizer_config.json) as --tokenizer")
    return o


def check_threads():
    """Refuses TOKENIZERS_PARALLELISM=false with RAYON_NUM_THREADS != 1: the
    run would be sequential while the harness thinks it measures N threads.
    Returns the thread count that will run (None = rayon's default, one per CPU)."""
    rayon = os.environ.get("RAYON_NUM_THREADS")
    par = os.environ.get("TOKENIZERS_PARALLELISM")
    threads = None
    if rayon not in (None, ""):
        try:
            threads = int(rayon)
        except ValueError:
            usage(f"RAYON_NUM_THREADS={rayon!r} is not an integer")
        if threads == 0:
            threads = None  # rayon: 0 = default
    if par is not None and par.lower() in _FALSE:
        if threads != 1:
            asked = "unset (one thread per CPU)" if rayon is None else repr(rayon)
            usage(f"TOKENIZERS_PARALLELISM={par} makes encode_batch sequential, but RAYON_NUM_THREADS is "
                  f"{asked}; set RAYON_NUM_THREADS=1 for one thread, or unset TOKENIZERS_PARALLELISM")
        return 1
    return threads if threads is not None else os.cpu_count()


def read_input(path):
    if path is None:
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def decode(raw):
    # As Node's readFileSync(..., 'utf8'): invalid bytes become U+FFFD.
    return raw.decode("utf-8", errors="replace")


def read_texts(path, prog="hf_tokenize"):
    """The "text" of every line of a JSONL file (stdin when path is None);
    a bad line exits with prog, the file and the line in the message
    (gigatoken_tokenize.py reads its input with this too)."""
    raw = decode(read_input(path))
    lines = raw.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    texts = []
    for n, line in enumerate(lines, 1):
        try:
            v = json.loads(line)
        except ValueError as e:
            raise SystemExit(f"{prog}: {path}: line {n}: {e}")
        if not isinstance(v, dict) or not isinstance(v.get("text"), str):
            raise SystemExit(f'{prog}: {path}: line {n}: no "text" string')
        texts.append(v["text"])
    return texts


def read_alpaca(path, eos):
    """The formatted prompt of every record (JSON array or JSONL)."""
    raw = decode(read_input(path))
    if raw.lstrip().startswith("["):
        recs = json.loads(raw)
    else:
        recs = []
        for n, line in enumerate(raw.split("\n"), 1):
            if line.strip() == "":
                continue
            try:
                recs.append(json.loads(line))
            except ValueError as e:
                raise SystemExit(f"hf_tokenize: {path}: line {n}: {e}")
    out = []
    for i, r in enumerate(recs):
        for k in ("instruction", "output"):
            if not isinstance(r.get(k), str):
                raise SystemExit(f'hf_tokenize: {path}: record {i}: "{k}" is not a string')
        # The seeds' format_example, verbatim.
        prompt = f"### Instruction:\n{r['instruction']}\n\n"
        if r.get("input"):
            prompt += f"### Input:\n{r['input']}\n\n"
        out.append(f"{prompt}### Response:\n{r['output']}{eos}")
    return out


def ids_line(ids):
    return '{"ids":[' + ",".join(map(str, ids)) + "]}\n"


def dumps(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def open_out(o):
    if o.out == "-":
        return sys.stdout
    if o.out == "none":
        return None
    return open(o.out, "w", encoding="utf-8")


def load_tokenizer(o):
    from tokenizers import Tokenizer

    tf = o.tokenizer
    if os.path.isdir(tf):
        tf = os.path.join(tf, "tokenizer.json")
    tok = Tokenizer.from_file(tf)
    if o.max_length > 0:
        tok.enable_truncation(o.max_length)
    if o.pad:
        pad_id = tok.token_to_id(o.pad_token)
        if pad_id is None:
            raise SystemExit(f"hf_tokenize: pad token {json.dumps(o.pad_token)} is not in the vocabulary")
        tok.enable_padding(direction="right", pad_id=pad_id, pad_token=o.pad_token, length=o.max_length)
    return tok


def run_tokenizers(o, threads, t0):
    tok = load_tokenizer(o)
    t1 = time.perf_counter()
    texts = read_alpaca(o.input, o.eos) if o.alpaca else read_texts(o.input)
    t2 = time.perf_counter()
    nbytes = sum(len(t.encode("utf-8")) for t in texts)

    if o.bench:
        tokens = 0
        for _ in range(max(1, o.warmup)):
            tokens = sum(len(e) for e in tok.encode_batch(texts, add_special_tokens=o.special))
        load = os.getloadavg()[0]
        secs, cpus = [], []
        for _ in range(o.runs):
            s0, c0 = time.perf_counter(), time.process_time()  # whole process, all threads
            tok.encode_batch(texts, add_special_tokens=o.special)
            secs.append(time.perf_counter() - s0)
            cpus.append(time.process_time() - c0)
        s, cs = statistics.median_low(secs), statistics.median_low(cpus)
        env = " ".join(f"{k}={os.environ[k]}" for k in ("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS",
                                                         "TOKENIZERS_PARALLELISM") if k in os.environ)
        print(dumps({
            "tokenizer": o.tokenizer, "env": env or "default threads", "lines": len(texts), "bytes": nbytes,
            "tokens": tokens, "add_special_tokens": o.special, "loadavg1_before": round(load, 2),
            "runs_s": [round(x, 3) for x in secs], "median_s": round(s, 3),
            "MB_per_s": round(nbytes / s / 1e6, 3), "tokens_per_s": round(tokens / s),
            "median_cpu_s": round(cs, 3), "MB_per_cpu_s": round(nbytes / cs / 1e6, 3),
            "tokens_per_cpu_s": round(tokens / cs),
        }))
        return

    out = open_out(o)
    tokens, encode_s, encode_cpu = 0, 0.0, 0.0
    for i in range(0, len(texts), o.batch):
        batch = texts[i:i + o.batch]
        s0, c0 = time.perf_counter(), time.process_time()
        encs = tok.encode_batch(batch, add_special_tokens=o.special)
        encode_s += time.perf_counter() - s0
        encode_cpu += time.process_time() - c0
        if out is not None:
            chunk = []
            for e in encs:
                ids = e.ids
                tokens += len(ids)
                chunk.append(ids_line(ids))
            out.write("".join(chunk))
        else:
            tokens += sum(len(e) for e in encs)
    finish(o, out, t0, t1, t2, len(texts), nbytes, tokens, encode_s, encode_cpu, threads)


def run_transformers(o, t0):
    from transformers import AutoTokenizer

    kw = {} if o.eos is None else {"eos_token": o.eos}
    tokenizer = AutoTokenizer.from_pretrained(o.tokenizer, **kw)
    # As the seeds: a tokenizer without a pad token pads with EOS.
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if o.pad_token is not None:
        tokenizer.pad_token = o.pad_token
    t1 = time.perf_counter()
    texts = read_alpaca(o.input, tokenizer.eos_token) if o.alpaca else read_texts(o.input)
    t2 = time.perf_counter()
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    kwargs = {}
    if o.max_length > 0:
        kwargs = {"truncation": True, "max_length": o.max_length}
        if o.pad:
            kwargs["padding"] = "max_length"
    if not o.special:
        kwargs["add_special_tokens"] = False

    out = open_out(o)
    tokens, encode_s, encode_cpu = 0, 0.0, 0.0
    for text in texts:
        s0, c0 = time.perf_counter(), time.process_time()
        enc = tokenizer(text, **kwargs)
        encode_s += time.perf_counter() - s0
        encode_cpu += time.process_time() - c0
        ids = enc["input_ids"]
        tokens += len(ids)
        if out is not None:
            out.write('{"ids":[' + ",".join(map(str, ids)) + '],"attention_mask":['
                      + ",".join(map(str, enc["attention_mask"])) + "]}\n")
    finish(o, out, t0, t1, t2, len(texts), nbytes, tokens, encode_s, encode_cpu, 1)


def finish(o, out, t0, t1, t2, lines, nbytes, tokens, encode_s, encode_cpu, threads):
    if out is not None:
        out.flush()
        if out is not sys.stdout:
            out.close()
    if o.bench_line:
        # After the IDs on stdout, or alone.
        sys.stdout.write(dumps({"bench": {
            "load_s": round(t1 - t0, 4), "read_s": round(t2 - t1, 4), "encode_s": round(encode_s, 4),
            "lines": lines, "bytes": nbytes, "tokens": tokens,
            "encode_mb_per_s": round(nbytes / encode_s / 1e6, 3) if encode_s > 0 else 0,
            "tokens_per_s": round(tokens / encode_s) if encode_s > 0 else 0,
            "threads": threads, "encode_cpu_s": round(encode_cpu, 4),
        }}) + "\n")
        sys.stdout.flush()


def main():
    o = parse_args(sys.argv[1:])
    threads = check_threads()
    t0 = time.perf_counter()
    if o.transformers:
        run_transformers(o, t0)
    else:
        run_tokenizers(o, threads, t0)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        sys.exit(1)
