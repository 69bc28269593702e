#!/usr/bin/env python3
# Writes input.jsonl: strings with runs of more than 30 (and more than 60)
# combining marks of mixed canonical combining classes, where
# golang.org/x/text's stream-safe NFC (U+034F after 30 non-starters) and HF
# tokenizers (Rust unicode-normalization: whole run sorted, no U+034F) differ.
import json, random

random.seed(3558)
# ccc: 0326 220, 0301 230, 0327 202, 0323 220, 0302 230, 0308 230, 0315 232,
# 031B 216, 0345 240, 05B0 10, 0E38 103, 3099 8, 1DCE 214, 0F71 129
marks = ["\u0326", "\u0301", "\u0327", "\u0323", "\u0302", "\u0308",
         "\u0315", "\u031b", "\u0345", "\u05b0", "\u0e38", "\u3099",
         "\u1dce", "\u0f71"]
bases = ["e", "a", "o", "u", "c", "s", " ", "\u03b1", "\u0391", "\u304b",
         "\u1100", "\uac00", "\u0627", "1", "\n", "\u00e9", "\u1ea1", "A"]
out = []
# The reported repro and its relatives.
out.append(" " + "\u0326" * 40)
out.append("e" + "\u0326" * 40)
out.append("e" + "\u0326" * 30 + "\u0301")
out.append("e" + "\u0326" * 29 + "\u0301")
out.append("e" + "\u0326" * 31 + "\u0301" + "x")
out.append("c" + "\u0301" * 35 + "\u0327" + " done")
out.append("\u0326" * 70)
out.append("word " + "\u0326\u0301\u0327" * 25 + " word")
out.append("\u00e9" + "\u0326" * 45 + "\u0301" * 3)
out.append("\u1ea1" + "\u0302" * 20 + "\u0323" * 20)
out.append("\u1100" + "\u0326" * 33 + "\u1161")
out.append("a" + "\u0326" * 31 + "\u034f" + "\u0301")
for n in (31, 32, 45, 61, 64, 90, 130):
    for _ in range(3):
        b = random.choice(bases)
        run = "".join(random.choice(marks) for _ in range(n))
        tail = random.choice(["", " ", "x", "\u0301", " end.", "\u00e9"])
        out.append(random.choice(["", "Hi ", "x"]) + b + run + tail)
# Several runs in one string, after letters and after spaces.
for _ in range(8):
    s = ""
    for _ in range(random.randint(2, 4)):
        s += random.choice(bases) + "".join(random.choice(marks) for _ in range(random.randint(25, 70)))
    out.append(s)
with open("input.jsonl", "w") as f:
    for s in out:
        f.write(json.dumps({"text": s}) + "\n")
