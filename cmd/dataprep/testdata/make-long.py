#!/usr/bin/env python3
"""Makes alpaca_long.json: 24 records built from alpaca_en_demo.json (records
repeated 2-5 times) so that some exceed 1024 tokens and exercise truncation.

    zstd -dc ../../../testdata/alpaca/alpaca_en_demo.json.zst > en.json
    python3 make-long.py en.json > alpaca_long.json && zstd -19 alpaca_long.json
"""
import json
import sys

en = json.load(open(sys.argv[1]))
out = []
for i in range(24):
    r = en[i * 37 % len(en)]
    k = 2 + i % 4
    out.append({"instruction": r["instruction"], "input": (r["input"] + " ") * (i % 3),
                "output": "\n\n".join([r["output"]] * k)})
json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
