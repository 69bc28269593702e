"""Seed parity against the seeds' own code.

Each seed's ``build_dataset`` runs VERBATIM, taken from the copies of the seed
scripts in python/tests/seeds/ (their seed text is checked by sha256 below),
with the real ``datasets`` library and ``transformers.AutoTokenizer``, on the
bundled Alpaca samples. ``dataprep --mode pad --labels copy``, run as the
examples run it (the model's tokenizer directory, the seed's length, one shard
per rank of the seed's world), must give exactly the seed dataset's
``input_ids``, ``attention_mask`` and ``labels``, record for record and in the
seed dataset's order (dataprep shuffles rows: each row's ``segments`` give its
source record, which is the seed dataset's index). The attention mask is the
one ``ferry.Loader`` yields to the training loop.

What is not the seed's own code, and why:

* ``load_dataset(DATASET_NAME, split=...)``: the Hub is unreachable here, so
  the name ``load_dataset`` in the seed's namespace is a shim that loads the
  local sample file with ``datasets.load_dataset("json", ...)`` and the seed's
  own ``split`` string (``train[:8000]``, ``train``). Every sample has fewer
  than 8,000 records, so the Ray seed's slice keeps all of them.
* The tokenizer: the seeds call ``AutoTokenizer.from_pretrained(MODEL_NAME)``
  (the base models Qwen/Qwen2.5-3B and meta-llama/Llama-3.1-8B), then set
  ``pad_token = eos_token`` when it is unset. The bundled tokenizer.json files
  are the models' own; their tokenizer_config.json files are the Instruct
  models' (EOS ``<|im_end|>``, ``<|eot_id|>``), so the model directory made
  here carries the base models' special tokens (EOS ``<|endoftext|>``, pad
  ``<|endoftext|>`` for Qwen2.5; EOS ``<|end_of_text|>``, no pad for
  Llama-3.1). The two lines after ``from_pretrained`` are the seeds'.
* ``MAX_SEQ_LEN`` / ``max_seq_len``: the seeds' 1024, and 64 to exercise
  truncation on most records (the Ray seed reads the module constant, which
  is set in the namespace its code runs in).
"""

import ast
import hashlib
import json
import os
import subprocess

import pytest

from helpers import REPO, build_go_tool, import_or_need, read_maybe_zstd

SEEDS = os.path.join(REPO, "python", "tests", "seeds")
MARKER = "# ---- end of header: below, the seed's text verbatim ----\n"
TOKDIR = os.path.join(REPO, "testdata", "tokenizers")
# The bundled Alpaca samples, in this order, as one JSON input (the seed's
# data set and dataprep read the same file): 2,123 records.
SAMPLES = [
    ("tiny", os.path.join(REPO, "testdata", "alpaca", "alpaca_tiny.json")),  # 100 records
    ("en", os.path.join(REPO, "testdata", "alpaca", "alpaca_en_demo.json.zst")),  # 999
    ("zh", os.path.join(REPO, "testdata", "alpaca", "alpaca_zh_demo.json.zst")),  # 1,000
    # 24 long records: a few reach the seeds' own length (truncation at 1,024).
    ("long", os.path.join(REPO, "cmd", "dataprep", "testdata", "alpaca_long.json.zst")),
]

# seed -> what the seed runs. sha256: of the seed text below the marker
# (the copy is verbatim; a changed copy is not the seed's code any more).
SEED = {
    "ray-train": {
        "script": os.path.join(SEEDS, "ray_train", "train_ray.py"),
        "sha256": "3f5ee1ef8b79517f6e0e684c65d25772d6af0fd68c178f224841a8a5bf3e234f",
        "tokenizer": "qwen2.5",
        # Qwen/Qwen2.5-3B's tokenizer_config.json: bos null, eos and pad <|endoftext|>.
        "special": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "world": 8,  # ScalingConfig(num_workers=8 GPUs)
        "dataset_name": "tatsu-lab/alpaca",
    },
    "torchrun-fsdp": {
        "script": os.path.join(SEEDS, "torchrun_fsdp", "train.py"),
        "sha256": "59427f5769e7cd17364cf2c395dc9111a79be9f58903698b66218cbe6e08322a",
        "tokenizer": "llama3.1",
        # meta-llama/Llama-3.1-8B's tokenizer_config.json: eos <|end_of_text|>, no pad token.
        "special": {"eos_token": "<|end_of_text|>", "pad_token": None},
        "world": 16,  # 2 nodes x 8 ranks
        "dataset_name": "tatsu-lab/alpaca",  # train.yaml parameters.dataset_name
    },
}
SEED_SEQ_LEN = 1024  # both seeds: MAX_SEQ_LEN = 1024 / parameters.max_seq_len: 1024


def seed_text(seed):
    """The seed's script, below the copy's header; checked against its sha256."""
    with open(SEED[seed]["script"], encoding="utf-8") as f:
        text = f.read()
    body = text[text.index(MARKER) + len(MARKER):]
    got = hashlib.sha256(body.encode("utf-8")).hexdigest()
    assert got == SEED[seed]["sha256"], f"{SEED[seed]['script']} is no longer the seed's text (sha256 {got})"
    return body


def seed_namespace(seed, load_dataset):
    """A namespace holding the seed script's module-level constants and its
    build_dataset, compiled from the seed's own source text, with
    ``load_dataset`` bound to the shim. Only these nodes run: the rest of the
    script (imports of ray, mlflow, torch.distributed; train_func, main) is
    not needed to build the data set."""
    body = seed_text(seed)
    tree = ast.parse(body, filename=SEED[seed]["script"])
    keep = [n for n in tree.body
            if isinstance(n, ast.Assign) or (isinstance(n, ast.FunctionDef) and n.name == "build_dataset")]
    assert any(isinstance(n, ast.FunctionDef) for n in keep), "no build_dataset in the seed script"
    ns = {"__name__": f"seed_{seed.replace('-', '_')}"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), SEED[seed]["script"], "exec"), ns)
    ns["load_dataset"] = load_dataset  # the seed's `from datasets import load_dataset`, pointed at the local file
    return ns


@pytest.fixture(scope="module")
def dataprep(tmp_path_factory):
    exe = os.environ.get("FERRY_DATAPREP")
    return exe or build_go_tool("cmd/dataprep", str(tmp_path_factory.mktemp("dataprep-bin")))


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """(path of the merged JSON input, [(name, first record, records)])."""
    records, parts = [], []
    for name, path in SAMPLES:
        part = json.loads(read_maybe_zstd(path).decode("utf-8"))
        parts.append((name, len(records), len(part)))
        records += part
    out = tmp_path_factory.mktemp("samples") / "alpaca_samples.json"
    out.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return str(out), parts


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """seed -> a model directory standing in for the seed's base model's
    tokenizer files: the bundled tokenizer.json (decompressed) and
    tokenizer_config.json with the base model's special tokens."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for seed, s in SEED.items():
        d = root / seed
        d.mkdir()
        src = os.path.join(TOKDIR, s["tokenizer"])
        (d / "tokenizer.json").write_bytes(read_maybe_zstd(os.path.join(src, "tokenizer.json.zst")))
        with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        for k, v in s["special"].items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2), encoding="utf-8")
        out[seed] = str(d)
    return out


_tokenizers = {}


def seed_tokenizer(model_dir):
    """The seeds' tokenizer set-up (train_func / main), cached per directory."""
    if model_dir not in _tokenizers:
        AutoTokenizer = import_or_need("transformers").AutoTokenizer
        # --- as in both seeds ---
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        # ---
        _tokenizers[model_dir] = tokenizer
    return _tokenizers[model_dir]


def local_load_dataset(seed, local, workdir, calls):
    """The shim for the seed's ``load_dataset(DATASET_NAME, split=...)``: the
    Hub is unreachable here, so the local JSON sample is loaded with
    datasets' own JSON builder, keeping the seed's split string."""
    datasets = import_or_need("datasets")

    def load_dataset(name, split=None):
        assert name == SEED[seed]["dataset_name"], name
        calls.append(split)
        return datasets.load_dataset("json", data_files=local, split=split,
                                     cache_dir=os.path.join(workdir, "hf-datasets"))

    return load_dataset


def run_seed_build_dataset(seed, model_dir, path, seq_len, workdir):
    """The seed's build_dataset, run as the seed runs it; returns (rows as
    plain lists, tokenizer, split strings load_dataset was called with)."""
    calls = []
    ns = seed_namespace(seed, local_load_dataset(seed, path, workdir, calls))
    tokenizer = seed_tokenizer(model_dir)
    if seed == "ray-train":
        ns["MAX_SEQ_LEN"] = seq_len  # the module constant build_dataset reads
        # train_func: dataset = build_dataset(tokenizer).with_format("torch")
        ds = ns["build_dataset"](tokenizer).with_format("torch")
    else:
        # main: dataset = build_dataset(tokenizer, dataset_name, max_seq_len)
        ds = ns["build_dataset"](tokenizer, SEED[seed]["dataset_name"], seq_len)
    ds = ds.with_format(None)  # the same rows as plain lists
    cols = {k: ds[k] for k in ("input_ids", "attention_mask", "labels")}
    return cols, tokenizer, calls


def dataprep_rows(directory, seq_len):
    """source record -> (input_ids, attention_mask, labels) of a pad-mode
    dataprep output: the batches ferry.Loader yields (world size 1, no
    shuffle, batch size 1: global position p), each mapped to its record by
    the shard row's segments. Rows repeated by the wrap-around must equal."""
    import ferry

    rows = {}
    loader = ferry.Loader(directory, 1, rank=0, world_size=1, shuffle=False, prefetch=False)
    with ferry.ShardSet(directory) as ss:
        m = ss.manifest
        assert (m.mode, m.labels, m.seq_len) == ("pad", "copy", seq_len), (m.mode, m.labels, m.seq_len)
        assert loader.steps_per_epoch == m.total_rows
        for p, batch in enumerate(loader):
            if p == m.total_rows:
                break
            shard, row = ss.position(p)
            sf = ss.shard(shard)
            segs = sf.segments(row)
            assert len(segs) == 1 and segs[0][1] == 0, f"shard {shard} row {row}: segments {segs}"
            ids = batch["input_ids"][0].tolist()
            assert ids == sf.view(row, 1)[0][0].tolist(), f"loader position {p} is not shard {shard} row {row}"
            got = (ids, batch["attention_mask"][0].tolist(), batch["labels"][0].tolist())
            assert rows.setdefault(segs[0][0], got) == got, f"record {segs[0][0]} has two different rows"
    loader.close()
    return rows, m


def first_diff(a, b):
    j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at token {j}: dataprep {a[max(j - 3, 0):j + 3]}, seed {b[max(j - 3, 0):j + 3]} " \
           f"(lengths {len(a)}, {len(b)})"


def where(i, parts):
    for name, first, count in parts:
        if first <= i < first + count:
            return f"record {i} ({name} sample, its record {i - first})"
    return f"record {i}"


@pytest.mark.parametrize("seq_len", [SEED_SEQ_LEN, 64])
@pytest.mark.parametrize("seed", list(SEED))
def test_dataprep_equals_seed_build_dataset(seed, seq_len, dataprep, model_dirs, samples, tmp_path):
    """dataprep --mode pad --labels copy == the seed's own build_dataset, on
    all bundled Alpaca samples."""
    model_dir = model_dirs[seed]
    data, parts = samples
    want, tokenizer, calls = run_seed_build_dataset(seed, model_dir, data, seq_len, str(tmp_path))
    assert calls == (["train[:8000]"] if seed == "ray-train" else ["train"]), calls
    n = len(want["input_ids"])
    assert n > 0 and len(want["labels"]) == len(want["attention_mask"]) == n

    # As the examples run it (train_ray.py's run_dataprep, torchrun-fsdp/train.yaml):
    # the model's tokenizer directory (EOS and pad from its tokenizer_config),
    # the seed's length, one shard per rank, and the seeds' labels.
    out = tmp_path / "shards"
    cmd = [dataprep, "--input", data, "--tokenizer", model_dir, "--seq-len", str(seq_len),
           "--mode", "pad", "--labels", "copy", "--ranks", str(SEED[seed]["world"]), "--out", str(out), "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}"
    rows, m = dataprep_rows(out, seq_len)
    assert (m.tokenizer.get("eos"), m.tokenizer.get("pad")) == (tokenizer.eos_token, tokenizer.pad_token), \
        (m.tokenizer, tokenizer.eos_token, tokenizer.pad_token)
    assert m.unique_rows == n and sorted(rows) == list(range(n)), \
        f"dataprep: {len(rows)} records in {m.unique_rows} rows, the seed's data set has {n}"

    # Row i of the seed's data set is record i of the input: compare in that order.
    got = {"input_ids": [], "attention_mask": [], "labels": []}
    for i in range(n):
        ids, mask, labels = rows[i]
        got["input_ids"].append(ids)
        got["attention_mask"].append(mask)
        got["labels"].append(labels)
    for col in ("input_ids", "attention_mask", "labels"):
        if got[col] != want[col]:
            i = next(i for i in range(n) if got[col][i] != want[col][i])
            pytest.fail(f"{seed} seq_len {seq_len}: {col} of {where(i, parts)} differs: "
                        f"{first_diff(got[col][i], want[col][i])}")
    assert n == sum(count for _, _, count in parts), n  # train[:8000] keeps all 2,123 records
    # Truncated records (full rows): at 1024 a few of the long sample's, at 64 most.
    truncated = sum(sum(mask) == seq_len for mask in want["attention_mask"])
    assert truncated >= (1 if seq_len == SEED_SEQ_LEN else n // 2), f"{truncated} records truncated"
    # The seeds train on the pads: labels are input_ids, pads included.
    assert got["labels"] == got["input_ids"]


def test_readme_diffs_are_current():
    """examples/README.md's diffs of the seeds against the examples are made
    of real lines: every removed line is in the seed copy, every added line
    in the example, every context line in both. When an example changes,
    python/tests/seeds/seeddiff.py --update-readme rewrites them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("seeddiff", os.path.join(SEEDS, "seeddiff.py"))
    seeddiff = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seeddiff)
    with open(os.path.join(REPO, "examples", "README.md"), encoding="utf-8") as f:
        readme = f.read().split("\n")
    fix = "run python/tests/seeds/seeddiff.py --update-readme (from the repository root)"
    for seed, files in seeddiff.README_DIFFS.items():
        start, end = readme.index(f"<!-- seeddiff:{seed} -->"), readme.index(f"<!-- /seeddiff:{seed} -->")
        block = readme[start + 1:end]
        fences = [i for i, line in enumerate(block) if line == "```diff"]
        assert len(fences) == len(files), f"examples/README.md, {seed}: {len(fences)} diffs, want {len(files)}; {fix}"
        for i, (seed_path, ex_path, _) in zip(fences, files):
            a = {x.rstrip("\n") for x in seeddiff.read(os.path.join(REPO, seed_path), True)}
            b = {x.rstrip("\n") for x in seeddiff.read(os.path.join(REPO, ex_path), False)}
            body = block[i + 1:block.index("```", i + 1)]
            assert body[1] == f"+++ {ex_path}", (body[:2], ex_path)
            for line in body[2:]:
                kind, text = line[:1], line[1:]
                ok = {"@": True, "-": text in a, "+": text in b, " ": text in a and text in b}.get(kind, False)
                assert ok, f"examples/README.md, diff of {seed_path} against {ex_path}: {line!r} is stale; {fix}"
