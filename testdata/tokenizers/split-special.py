"""Writes a family's add_special_tokens=True goldens as what they add to the
add_special_tokens=False ones, which is what is checked in (see README.txt):

  python split-special.py SPECIAL.ids.jsonl NOSPECIAL.ids.jsonl > corpus-dev.MODEL.special.jsonl

For each corpus line it prints {"prefix":[...],"suffix":[...]} such that the
special ids are prefix + nospecial ids + suffix (the shortest prefix that
does), and fails naming the line where no such split exists: then the full
special goldens must be checked in instead.
"""
import json
import sys


def main(special_path, nospecial_path):
    with open(special_path, encoding="utf-8") as fs, open(nospecial_path, encoding="utf-8") as fn:
        for n, (ls, ln) in enumerate(zip(fs, fn, strict=True), 1):
            a, b = json.loads(ls)["ids"], json.loads(ln)["ids"]
            for i in range(len(a) - len(b) + 1):
                if a[i:i + len(b)] == b:
                    pre, suf = a[:i], a[i + len(b):]
                    sys.stdout.write('{"prefix":[%s],"suffix":[%s]}\n' % (",".join(map(str, pre)), ",".join(map(str, suf))))
                    break
            else:
                sys.exit(f"{special_path}: line {n}: the special ids do not contain the nospecial ids")


if __name__ == "__main__":
    main(*sys.argv[1:])
