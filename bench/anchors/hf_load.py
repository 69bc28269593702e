"""Times HF tokenizers' Tokenizer.from_file once, for ferry's Load benchmarks.

    python bench/anchors/hf_load.py TOKENIZER_JSON

prints the bench line {"bench": {"load_s": wall seconds, "load_cpu_s": process
CPU seconds}} around the from_file call alone (not the interpreter start or
the import). `go run ./bench/tokenize` and make bench's "tokenizer load" jobs
run it in a fresh process per sample; ferry's side is `tokenize-bench load`.
"""
import json
import sys
import time

from tokenizers import Tokenizer


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: hf_load.py TOKENIZER_JSON")
    c0, t0 = time.process_time(), time.perf_counter()
    Tokenizer.from_file(sys.argv[1])
    t1, c1 = time.perf_counter(), time.process_time()
    print(json.dumps({"bench": {"load_s": t1 - t0, "load_cpu_s": c1 - c0}}))


if __name__ == "__main__":
    main()
