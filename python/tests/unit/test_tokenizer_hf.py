"""Live differential tests of ferry's tokenizer and dataprep against the real
Hugging Face stack (the pinned venv: ``tokenizers``, ``transformers``).

* HF ``tokenizers`` (Python binding) on the whole hard corpus
  (testdata/tokenizers/corpus-dev.jsonl.zst) gives exactly the checked-in
  goldens, for both bundled tokenizers, with and without special tokens;
* ``dataprep tokenize`` (ferry's Go tokenizer) gives exactly HF's IDs there;
* ``dataprep --mode pad --labels copy`` rows equal what
  ``transformers.AutoTokenizer`` gives when called per record exactly as the
  seed workloads call it (prompt format, ``tokenizer.eos_token`` appended,
  ``pad_token = eos_token`` when unset, ``truncation=True, max_length=L,
  padding="max_length"``, ``labels = input_ids.copy()``), on the bundled
  Alpaca samples, with the tokenizer_config's EOS and with a base model's.

Under FERRY_REQUIRE_TOOLS=1 (``make test``) a missing module or tool fails;
otherwise it skips.
"""

import json
import os
import shutil
import subprocess

import pytest

from helpers import REPO, build_go_tool, import_or_need, read_maybe_zstd

TOKDIR = os.path.join(REPO, "testdata", "tokenizers")
CORPUS = os.path.join(TOKDIR, "corpus-dev.jsonl.zst")
TOKENIZERS = ["qwen2.5", "llama3.1"]
# The EOS of the base models the seeds fine-tune (Qwen2.5-3B, Llama-3.1-8B);
# the bundled tokenizer_config.json files are the Instruct ones.
BASE_EOS = {"qwen2.5": "<|endoftext|>", "llama3.1": "<|end_of_text|>"}
ALPACA = {
    "tiny": os.path.join(REPO, "testdata", "alpaca", "alpaca_tiny.json"),
    "en": os.path.join(REPO, "testdata", "alpaca", "alpaca_en_demo.json.zst"),
    "zh": os.path.join(REPO, "testdata", "alpaca", "alpaca_zh_demo.json.zst"),
    # 24 records longer than 1024 tokens: truncation at the seeds' length.
    "long": os.path.join(REPO, "cmd", "dataprep", "testdata", "alpaca_long.json.zst"),
}


@pytest.fixture(scope="module")
def dataprep(tmp_path_factory):
    return build_go_tool("cmd/dataprep", str(tmp_path_factory.mktemp("dataprep-bin")))


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """name -> a model directory transformers and HF tokenizers can load:
    tokenizer.json (decompressed) + the bundled tokenizer_config.json."""
    root = tmp_path_factory.mktemp("tok")
    out = {}
    for name in TOKENIZERS:
        d = root / name
        d.mkdir()
        (d / "tokenizer.json").write_bytes(read_maybe_zstd(os.path.join(TOKDIR, name, "tokenizer.json.zst")))
        shutil.copy(os.path.join(TOKDIR, name, "tokenizer_config.json"), d / "tokenizer_config.json")
        out[name] = str(d)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(path of the decompressed corpus JSONL, its texts)."""
    raw = read_maybe_zstd(CORPUS)
    path = tmp_path_factory.mktemp("corpus") / "corpus-dev.jsonl"
    path.write_bytes(raw)
    texts = [json.loads(line)["text"] for line in raw.decode("utf-8").split("\n") if line]
    assert len(texts) == 7439, "testdata/tokenizers/README.txt says 7,439 lines"
    return str(path), texts


_hf_ids = {}


@pytest.fixture(scope="module")
def hf_ids(model_dirs, corpus):
    """(name, special) -> HF tokenizers' ids for every corpus line (cached)."""
    tokenizers = import_or_need("tokenizers")

    def get(name, special):
        key = (name, special)
        if key not in _hf_ids:
            tok = tokenizers.Tokenizer.from_file(os.path.join(model_dirs[name], "tokenizer.json"))
            _hf_ids[key] = [e.ids for e in tok.encode_batch(corpus[1], add_special_tokens=special)]
        return _hf_ids[key]

    return get


def golden_ids(name, special):
    """The checked-in goldens: the add_special_tokens=False ids, and for
    special=True each line's prefix + those ids + suffix (README.txt)."""
    nospecial = read_ids(read_maybe_zstd(os.path.join(TOKDIR, f"corpus-dev.{name}.nospecial.ids.jsonl.zst")).decode("utf-8").split("\n"))
    if not special:
        return nospecial
    raw = read_maybe_zstd(os.path.join(TOKDIR, f"corpus-dev.{name}.special.jsonl.zst")).decode("utf-8")
    around = [json.loads(line) for line in raw.split("\n") if line]
    assert len(around) == len(nospecial), f"{name}: {len(around)} special lines, {len(nospecial)} nospecial"
    return [a["prefix"] + ids + a["suffix"] for a, ids in zip(around, nospecial)]


def read_ids(lines):
    return [json.loads(line)["ids"] for line in lines if line.strip() and not line.startswith('{"bench"')]


def first_diff(got, want, what):
    """An assertion message for the first line where two id lists differ, or ""."""
    if len(got) != len(want):
        return f"{what}: {len(got)} lines, want {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return (f"{what}: line {i + 1} differs at token {j}: got {a[max(j - 3, 0):j + 3]}, "
                    f"want {b[max(j - 3, 0):j + 3]} (lengths {len(a)}, {len(b)})")
    return ""


@pytest.mark.parametrize("special", [True, False], ids=["special", "nospecial"])
@pytest.mark.parametrize("name", TOKENIZERS)
def test_hf_tokenizers_corpus_equals_goldens(name, special, hf_ids):
    """HF tokenizers (Python binding, the venv's version) reproduces the
    checked-in goldens on all 7,439 lines of the hard corpus."""
    msg = first_diff(hf_ids(name, special), golden_ids(name, special), f"HF tokenizers vs the goldens of {name} (special={special})")
    assert not msg, msg


@pytest.mark.parametrize("special", [True, False], ids=["special", "nospecial"])
@pytest.mark.parametrize("name", TOKENIZERS)
def test_ferry_tokenize_corpus_equals_hf(name, special, dataprep, corpus, hf_ids):
    """`dataprep tokenize` (ferry's Go tokenizer) gives exactly HF's IDs on
    the whole hard corpus."""
    cmd = [dataprep, "tokenize", "--tokenizer", os.path.join(TOKDIR, name), "--threads", "2", corpus[0]]
    if not special:
        cmd.insert(2, "--no-special")
    r = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}"
    msg = first_diff(read_ids(r.stdout.split("\n")), hf_ids(name, special), f"ferry vs HF tokenizers ({name})")
    assert not msg, msg


def alpaca_records(path):
    raw = read_maybe_zstd(path).decode("utf-8")
    if raw.lstrip().startswith("["):
        return json.loads(raw)
    return [json.loads(line) for line in raw.split("\n") if line.strip()]


_seed_tokenizers = {}


def seed_tokenizer(model_dir, eos=None):
    """The seeds' tokenizer, loaded from model_dir (eos: a base model's
    eos_token, else the config's), cached: AutoTokenizer.from_pretrained,
    then pad_token = eos_token when it has none, as the seeds do."""
    key = (model_dir, eos)
    if key not in _seed_tokenizers:
        transformers = import_or_need("transformers")
        kw = {} if eos is None else {"eos_token": eos}
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, **kw)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        _seed_tokenizers[key] = tokenizer
    return _seed_tokenizers[key]


def seed_rows(tokenizer, records, max_seq_len):
    """What the seeds' build_dataset gives for records; the body of
    format_example is the seeds' code verbatim."""

    def format_example(row):
        instruction = row.get("instruction", "")
        context = row.get("input", "")
        response = row.get("output", "")
        prompt = f"### Instruction:\n{instruction}\n\n"
        if context:
            prompt += f"### Input:\n{context}\n\n"
        text = f"{prompt}### Response:\n{response}{tokenizer.eos_token}"
        out = tokenizer(text, truncation=True, max_length=max_seq_len, padding="max_length")
        out["labels"] = out["input_ids"].copy()
        return out

    return [format_example(r) for r in records]


def shard_rows(directory):
    """sample -> (input_ids, labels, length) of every row of a pad-mode
    dataprep output, read with ferry.ShardSet; checks that repeated
    (wrapped-around) positions hold the same row."""
    import ferry

    rows = {}
    with ferry.ShardSet(directory) as ss:
        m = ss.manifest
        assert m.mode == "pad" and m.labels == "copy", (m.mode, m.labels)
        for rank in range(m.ranks):
            sf = ss.shard(rank)
            for row in range(m.rows_per_rank):
                segs = sf.segments(row)
                assert len(segs) == 1 and segs[0][1] == 0, f"rank {rank} row {row}: segments {segs}"
                ids, labels, length, _ = sf.view(row, 1)
                got = (ids[0].tolist(), labels[0].tolist(), int(length[0]))
                sample = segs[0][0]
                assert rows.setdefault(sample, got) == got, f"sample {sample} has two different rows"
    return rows, m


# The seeds' length with the config's EOS and with the base model's, and a
# short length (most records truncated) with the config's.
@pytest.mark.parametrize("eos,seq_len", [("config", 1024), ("base", 1024), ("config", 64)])
@pytest.mark.parametrize("data", list(ALPACA))
@pytest.mark.parametrize("name", TOKENIZERS)
def test_dataprep_pad_copy_equals_transformers(name, data, eos, seq_len, dataprep, model_dirs, tmp_path):
    """`dataprep --mode pad --labels copy` reproduces the seeds' rows exactly:
    input_ids, labels and attention_mask of transformers.AutoTokenizer called
    per record as the seeds call it, for every record."""
    records = alpaca_records(ALPACA[data])
    base = BASE_EOS[name] if eos == "base" else None
    tokenizer = seed_tokenizer(model_dirs[name], base)
    want = seed_rows(tokenizer, records, seq_len)
    out = tmp_path / "shards"
    cmd = [dataprep, "--input", ALPACA[data], "--tokenizer", os.path.join(TOKDIR, name), "--seq-len", str(seq_len),
           "--ranks", "3", "--mode", "pad", "--labels", "copy", "--out", str(out), "--quiet"]
    if base is not None:
        cmd += ["--eos", base]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}"
    rows, m = shard_rows(out)
    assert m.unique_rows == len(records) and sorted(rows) == list(range(len(records))), \
        f"{len(rows)} samples in {m.unique_rows} rows, want all {len(records)} records"
    assert m.tokenizer.get("eos") == tokenizer.eos_token and m.tokenizer.get("pad") == tokenizer.pad_token, \
        (m.tokenizer.get("eos"), m.tokenizer.get("pad"), tokenizer.eos_token, tokenizer.pad_token)
    truncated = 0
    for i, w in enumerate(want):
        ids, labels, length = rows[i]
        mask = [1 if j < length else 0 for j in range(seq_len)]
        where = f"{name} {data} record {i} (eos {tokenizer.eos_token}, seq_len {seq_len})"
        assert ids == w["input_ids"], where + ": " + first_diff([ids], [w["input_ids"]], "input_ids")
        assert labels == w["labels"], where + ": labels"
        assert mask == w["attention_mask"], f"{where}: length {length}, transformers' mask sums to " \
                                            f"{sum(w['attention_mask'])}"
        truncated += length == seq_len
    if data == "long" or seq_len == 64:
        assert truncated > 0, "no record reached the truncation length"
