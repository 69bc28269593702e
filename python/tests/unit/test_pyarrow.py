"""pyarrow and Hugging Face datasets read dataprep shards.

- pyarrow's memory-mapped IPC file reader gives, column for column, what
  ``ferry.ShardSet`` maps (schema metadata, record batch rows, every column).
- The shared checker (internal/testutil/arrowcheck/check_shards.py, also run
  by ShardMaker on every directory the tests make and by the Go tests) sees a
  flipped byte.
- ``datasets.Dataset.from_file`` cannot read a shard (it reads the Arrow IPC
  *stream* format; shards are the IPC *file* format); ``load_dataset("arrow")``
  and ``ferry.to_hf_dataset`` can, with the same values.

Needs pyarrow and datasets (the test venv); under FERRY_REQUIRE_TOOLS=1 a
missing module fails the tests instead of skipping them.
"""

import hashlib
import importlib
import os
import pickle
import sys

import numpy as np
import pytest

import ferry
from helpers import arrowcheck


def need(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        msg = f"needs {name} in {sys.executable} (scripts/setup-test-deps builds the test venv): {e}"
        if os.environ.get("FERRY_REQUIRE_TOOLS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def token_columns(mode):
    return ("input_ids", "labels") + (("position_ids",) if mode == "pack" else ())


def want_metadata(m, rank):
    return {"ferry.format": "ferry-shards", "ferry.version": "1", "ferry.rank": str(rank),
            "ferry.ranks": str(m.ranks), "ferry.seq_len": str(m.seq_len), "ferry.mode": m.mode,
            "ferry.labels": m.labels, "ferry.tokenizer_sha256": m.tokenizer["sha256"]}


def shardset_rows(sset, rank):
    """Every column of a shard as ferry.ShardSet maps it; segments as lists
    of (sample, start, length)."""
    sf = sset.shard(rank)
    n = sset.manifest.rows_per_rank
    cols, _ = sf.span(0, n)
    cols = {c: np.asarray(a) for c, a in cols.items()}
    cols["segments"] = [sf.segments(i) for i in range(n)]
    return cols


CASES = [("pad", ()), ("pack", ()), ("pad", ("-batch-rows", "7", "-labels", "copy")),
         ("pack", ("-batch-rows", "3", "-labels", "mask-prompt", "-drop-last"))]


@pytest.mark.parametrize("mode,extra", CASES)
def test_pyarrow_equals_shardset(make_shards, mode, extra):
    pa = need("pyarrow")
    need("pyarrow.ipc")
    d = make_shards(ranks=3, rows=120, seq_len=16, mode=mode, extra=extra)
    sset = ferry.ShardSet(d, verify="sha256")
    m = sset.manifest
    for r in range(m.ranks):
        want = shardset_rows(sset, r)
        path = sset.shard(r).path
        with pa.memory_map(path, "r") as mm:
            reader = pa.ipc.open_file(mm)
            md = {k.decode(): v.decode() for k, v in reader.schema.metadata.items()}
            assert md == want_metadata(m, r), path
            assert [reader.get_batch(k).num_rows for k in range(reader.num_record_batches)] == \
                [b["rows"] for b in m.files[r]["batches"]]
            table = reader.read_all()
        assert table.num_rows == m.rows_per_rank
        assert table.schema.names == [*token_columns(mode), "length", "segments"]
        for c in token_columns(mode):
            got = table.column(c).combine_chunks().flatten().to_numpy().reshape(-1, m.seq_len)
            np.testing.assert_array_equal(got, want[c], err_msg=f"rank {r} column {c}")
        np.testing.assert_array_equal(table.column("length").to_numpy(), want["length"])
        segs = table.column("segments").to_pylist()
        assert [[(s["sample"], s["start"], s["length"]) for s in row] for row in segs] == want["segments"], r


def shardset_expectation(sset):
    """What ferry.ShardSet maps, in the checker's --expect form (per record
    batch and column, the SHA-256 of the little-endian values)."""
    m = sset.manifest
    out = {}
    for r in range(m.ranks):
        sf = sset.shard(r)
        batches = []
        for k, b in enumerate(sf.entry["batches"]):
            arrays = dict(sf.batch_columns(k))
            segs = [sf.segments(b["row_start"] + i) for i in range(b["rows"])]
            flat = [s for row in segs for s in row]
            arrays["segments.offsets"] = np.cumsum([0] + [len(s) for s in segs]).astype("<i4")
            arrays["segments.sample"] = np.array([s[0] for s in flat], "<i8")
            arrays["segments.start"] = np.array([s[1] for s in flat], "<i4")
            arrays["segments.length"] = np.array([s[2] for s in flat], "<i4")
            batches.append({"rows": b["rows"], "sha256": {
                c: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for c, a in arrays.items()}})
        path = os.path.abspath(sf.path)
        out[path] = {"path": path, "meta": want_metadata(m, r), "batches": batches}
    return out


def test_checker_reports_flipped_byte(make_shards):
    need("pyarrow")
    check = arrowcheck()
    d = make_shards(ranks=2, rows=60, seq_len=16, mode="pad", extra=("-batch-rows", "8", "-labels", "copy"))
    sset = ferry.ShardSet(d)
    expect = shardset_expectation(sset)
    rep = check.check_dirs([d], expect)
    assert rep.ok, rep.text()
    assert rep.shards == 2 and rep.rows == 60 and rep.batches == 8
    m = sset.manifest
    sset.close()
    # The same token of rank 1, row 0 changed in input_ids and labels alike:
    # the format's rules cannot tell (labels still equal the ids), the
    # file's SHA-256 and ferry's views taken before can.
    path = os.path.join(d, m.files[1]["path"])
    bufs = m.files[1]["batches"][0]["buffers"]
    with open(path, "r+b") as fh:
        for c in ("input_ids", "labels"):
            fh.seek(bufs[c]["offset"])
            b = fh.read(1)
            fh.seek(bufs[c]["offset"])
            fh.write(bytes([b[0] ^ 1]))
    rep = check.check_dirs([d], expect)
    text = rep.text()
    assert not rep.ok
    for want in ("sha256", "batch 0 (rows 0..7) column input_ids: pyarrow's values hash",
                 "batch 0 (rows 0..7) column labels: pyarrow's values hash"):
        assert want in text, text
    assert all(m.files[1]["path"] in p for p in rep.problems), text
    alone = check.check_dirs([d])  # no expectation: only the checksum sees it
    assert len(alone.problems) == 1 and "manifest says" in alone.problems[0], alone.text()
    # A flipped byte in the padding breaks a rule: no expectation needed.
    L = m.seq_len
    row = int(np.flatnonzero(ferry.ShardSet(d).shard(0).batch_columns(0)["length"] < L)[0])
    with open(os.path.join(d, m.files[0]["path"]), "r+b") as fh:
        off = m.files[0]["batches"][0]["buffers"]["input_ids"]["offset"] + (row * L + L - 1) * 4
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ 1]))
    text = check.check_dirs([d]).text()
    assert f"batch 0 (rows 0..7): input_ids: padding that is not pad_id 0 in 1 rows, first row {row}" in text, text


def shard_path(d, rank):
    m = ferry.read_manifest(d)
    return os.path.join(d, m.files[rank]["path"])


def test_hf_from_file_cannot_read_a_shard(make_shards):
    pa = need("pyarrow")
    datasets = need("datasets")
    d = make_shards(ranks=1, rows=20, seq_len=16)
    try:
        datasets.Dataset.from_file(shard_path(d, 0))
    except pa.ArrowInvalid as e:
        # The stream reader takes the file format's magic "ARRO" for a
        # message length: 0x4F525241.
        assert "1330795073" in str(e), e
    else:
        pytest.fail(f"datasets {datasets.__version__} now reads the Arrow IPC file format with Dataset.from_file: "
                    "update docs/shard-format.md and ferry/hf.py")


def assert_hf_equals_shardset(ds, d, rank):
    sset = ferry.ShardSet(d)
    m = sset.manifest
    want = shardset_rows(sset, rank)
    assert ds.num_rows == m.rows_per_rank
    assert ds.column_names == [*token_columns(m.mode), "length", "segments"]
    for c in token_columns(m.mode):
        assert ds.features[c].length == m.seq_len and ds.features[c].feature.dtype == "int32", ds.features
    np_ds = ds.with_format("numpy")
    for c in (*token_columns(m.mode), "length"):
        np.testing.assert_array_equal(np_ds[c], want[c], err_msg=f"column {c}")
    assert [[(s["sample"], s["start"], s["length"]) for s in row] for row in ds["segments"]] == want["segments"]


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_hf_load_dataset_arrow(make_shards, tmp_path, mode):
    datasets = need("datasets")
    d = make_shards(ranks=2, rows=80, seq_len=16, mode=mode, extra=("-batch-rows", "5"))
    ds = datasets.load_dataset("arrow", data_files=shard_path(d, 1), split="train", cache_dir=str(tmp_path / "hf"))
    assert_hf_equals_shardset(ds, d, 1)


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_to_hf_dataset_zero_copy(make_shards, mode):
    pa = need("pyarrow")
    need("datasets")
    d = make_shards(ranks=2, rows=2000, seq_len=128, mode=mode, extra=("-batch-rows", "100"))
    before = pa.total_allocated_bytes()
    ds = ferry.to_hf_dataset(d, 1)
    # The rows stay in the mapped shard: pyarrow allocated (almost) nothing.
    assert pa.total_allocated_bytes() - before < 64 << 10, os.path.getsize(shard_path(d, 1))
    assert_hf_equals_shardset(ds, d, 1)
    with pytest.raises(ValueError, match="rank 2 outside"):
        ferry.to_hf_dataset(d, 2)


def test_to_hf_dataset_stream_dir(make_shards, tmp_path):
    need("datasets")
    d = make_shards(ranks=2, rows=300, seq_len=32, mode="pack", extra=("-batch-rows", "9"))
    out = tmp_path / "hf-stream"
    ds = ferry.to_hf_dataset(d, 0, stream_dir=str(out))
    assert [f["filename"] for f in ds.cache_files] == [str(out / "rank-00000-of-00002.arrow")]
    assert_hf_equals_shardset(ds, d, 0)
    mtime = os.stat(ds.cache_files[0]["filename"]).st_mtime_ns
    again = ferry.to_hf_dataset(d, 0, stream_dir=str(out))  # reused, not rewritten
    assert os.stat(again.cache_files[0]["filename"]).st_mtime_ns == mtime
    assert_hf_equals_shardset(pickle.loads(pickle.dumps(again)), d, 0)
