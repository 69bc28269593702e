#!/usr/bin/env python3
"""Unified diff of a seed script against an example, whole or per top-level
part, with the files' own line numbers (what examples/README.md shows).

    python/tests/seeds/seeddiff.py [-UN] SEED EXAMPLE [PART ...]

SEED is a copy under python/tests/seeds/ (its header, down to the marker
line, is left out), EXAMPLE a file under examples/. PART: "prelude" (the
lines before the first top-level def or class: docstring, imports,
constants), "imports" (the prelude without the module docstring), "NAME"
(a top-level function or class in both), "NAME:OTHER" (the seed's NAME
against the example's OTHER), "-NAME" (the seed's NAME, deleted) or "+NAME"
(the example's NAME, new). Without PART: the whole
files. -UN: N lines of context (default 3). YAML files: whole files only.

    python/tests/seeds/seeddiff.py --update-readme [examples/README.md]

rewrites the diffs examples/README.md shows (README_DIFFS below). Run from
the repository root.
"""

import ast
import difflib
import sys

MARKER = "# ---- end of header: below, the seed's text verbatim ----\n"


def read(path, seed):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if seed:
        text = text[text.index(MARKER) + len(MARKER):]
    return text.splitlines(keepends=True)


def spans(lines):
    """name -> (first, end) 0-based line range of each top-level def/class,
    decorators and preceding comments excluded; "prelude" -> (0, first def)."""
    tree = ast.parse("".join(lines))
    out, first = {}, len(lines)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            out[node.name] = (start, node.end_lineno)
            first = min(first, start)
    end = first
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    out["prelude"] = (0, end)
    doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
    out["imports"] = (doc.end_lineno if doc is not None else 0, end)
    return out


def hunks(a, a0, b, b0, n=3):
    """Unified-diff hunks of a against b; a0, b0: 0-based line offsets of a, b in their files."""
    out = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(n):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        na, nb = i2 - i1, j2 - j1
        out.append(f"@@ -{a0 + i1 + (1 if na else 0)},{na} +{b0 + j1 + (1 if nb else 0)},{nb} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + x for x in a[i1:i2]]
                continue
            out += ["-" + x for x in a[i1:i2]]
            out += ["+" + x for x in b[j1:j2]]
    return [x if x.endswith("\n") else x + "\n" for x in out]


def render(seed_path, ex_path, parts, n=3):
    a, b = read(seed_path, True), read(ex_path, False)
    name = seed_path.rsplit("/", 1)[-1]
    out = [f"--- seed/{name}\n", f"+++ {ex_path}\n"]
    if not parts:
        return out + hunks(a, 0, b, 0, n)
    sa, sb = spans(a), spans(b)
    for part in parts:
        if part.startswith("-"):
            (i, j), (k, l) = sa[part[1:]], (0, 0)
        elif part.startswith("+"):
            (i, j), (k, l) = (0, 0), sb[part[1:]]
        else:
            x, _, y = part.partition(":")
            (i, j), (k, l) = sa[x], sb[y or x]
        out += hunks(a[i:j], i, b[k:l], k, n)
    return out


SEEDS = "python/tests/seeds"
# What examples/README.md shows, per seed: (seed copy, example, parts).
README_DIFFS = {
    "ray-train": [
        (f"{SEEDS}/ray_train/train.yaml", "examples/ray-train/train.yaml", []),
        (f"{SEEDS}/ray_train/train_ray.py", "examples/ray-train/train_ray.py",
         ["imports", "-build_dataset", "train_func", "main"]),
    ],
    "torchrun-fsdp": [
        (f"{SEEDS}/torchrun_fsdp/train.yaml", "examples/torchrun-fsdp/train.yaml", []),
        (f"{SEEDS}/torchrun_fsdp/train.py", "examples/torchrun-fsdp/train.py", ["imports", "-build_dataset", "main"]),
    ],
}


def readme_block(seed):
    out = []
    for seed_path, ex_path, parts in README_DIFFS[seed]:
        cmd = " ".join([f"{SEEDS}/seeddiff.py", seed_path, ex_path] + parts)
        what = f"{ex_path.rsplit('/', 1)[-1]}: " + (", ".join(parts) if parts else "whole file")
        out += ["", f"<details><summary>{what}</summary>", "", f"`{cmd}`", "", "```diff"]
        out += [x.rstrip("\n") for x in render(seed_path, ex_path, parts)]
        out += ["```", "", "</details>"]
    return out + [""]


def update_readme(path):
    """Rewrite the blocks between <!-- seeddiff:SEED --> and <!-- /seeddiff:SEED --> in path."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for seed in README_DIFFS:
        start, end = lines.index(f"<!-- seeddiff:{seed} -->"), lines.index(f"<!-- /seeddiff:{seed} -->")
        lines[start + 1:end] = readme_block(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv):
    if argv[:1] == ["--update-readme"]:
        update_readme(argv[1] if len(argv) > 1 else "examples/README.md")
        return
    if len(argv) < 2:
        sys.exit(__doc__)
    n = 3
    if argv and argv[0].startswith("-U"):
        n, argv = int(argv[0][2:]), argv[1:]
    sys.stdout.writelines(render(argv[0], argv[1], argv[2:], n))

if __name__ == "__main__":
    main(sys.argv[1:])
