"""Corrupt or missing manifest/shards, bad states: clear errors that name the file."""

import json
import os
import shutil

import pytest

import ferry


@pytest.fixture(scope="module")
def good(make_shards):
    return make_shards(ranks=2, rows=20, seq_len=8)


def copy_of(good, tmp_path):
    d = tmp_path / "out"
    shutil.copytree(good, d)
    return str(d)


def edit_manifest(d, fn):
    p = os.path.join(d, "manifest.json")
    with open(p) as f:
        m = json.load(f)
    fn(m)
    with open(p, "w") as f:
        json.dump(m, f)


def shard0(d):
    return os.path.join(d, "rank-00000-of-00002.arrow")


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def remove(path):
    os.remove(path)


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 8)


CASES = [
    # name, mess(d), expected exception, message fragment
    ("no manifest", lambda d: remove(os.path.join(d, "manifest.json")), ferry.MissingManifestError, "manifest.json: not found"),
    ("manifest not JSON", lambda d: open(os.path.join(d, "manifest.json"), "w").write("{\"format\": "),
     ferry.ManifestError, "invalid JSON at byte"),
    ("wrong format", lambda d: edit_manifest(d, lambda m: m.update(format="other")), ferry.ManifestError, "format = 'other'"),
    ("future version", lambda d: edit_manifest(d, lambda m: m.update(version=3)), ferry.ManifestError, "version = 3"),
    ("version 2 without sources", lambda d: edit_manifest(d, lambda m: m.update(version=2)), ferry.ManifestError,
     "version 2 lists its sources"),
    ("bad mode", lambda d: edit_manifest(d, lambda m: m.update(mode="zip")), ferry.ManifestError, "mode = 'zip'"),
    ("totals disagree", lambda d: edit_manifest(d, lambda m: m.update(total_rows=m["total_rows"] + 1)),
     ferry.ManifestError, "total_rows"),
    ("file missing from list", lambda d: edit_manifest(d, lambda m: m["files"].pop()), ferry.ManifestError,
     "entries in 'files'"),
    ("path escapes", lambda d: edit_manifest(d, lambda m: m["files"][0].update(path="../x.arrow")),
     ferry.ManifestError, "path = '../x.arrow'"),
    ("offset past end", lambda d: edit_manifest(
        d, lambda m: m["files"][0]["batches"][0]["buffers"]["labels"].update(offset=(m["files"][0]["bytes"] // 8 + 1) * 8)),
     ferry.ManifestError, "buffer 'labels': bytes ["),
    ("unaligned offset", lambda d: edit_manifest(
        d, lambda m: m["files"][0]["batches"][0]["buffers"]["input_ids"].update(
            offset=m["files"][0]["batches"][0]["buffers"]["input_ids"]["offset"] + 4)),
     ferry.ManifestError, "not a multiple of 8"),
    ("short buffer", lambda d: edit_manifest(
        d, lambda m: m["files"][0]["batches"][0]["buffers"]["input_ids"].update(length=4)),
     ferry.ManifestError, "length 4, want >="),
    ("batches do not tile", lambda d: edit_manifest(d, lambda m: m["files"][0]["batches"][0].update(row_start=1)),
     ferry.ManifestError, "row_start 1, want 0"),
    ("shard missing", lambda d: remove(shard0(d)), ferry.MissingShardError, "rank-00000-of-00002.arrow: shard of rank 0"),
    ("shard truncated", lambda d: truncate(shard0(d)), ferry.ShardError, "manifest says"),
    ("bad head magic", lambda d: flip_byte(shard0(d), 0), ferry.ShardError, "byte 0: magic"),
    ("bad tail magic", lambda d: flip_byte(shard0(d), os.path.getsize(shard0(d)) - 1), ferry.ShardError,
     "trailing magic"),
]


@pytest.mark.parametrize("name,mess,exc,frag", CASES, ids=[c[0] for c in CASES])
def test_corrupt_inputs(good, tmp_path, name, mess, exc, frag):
    d = copy_of(good, tmp_path)
    mess(d)
    with pytest.raises(exc) as ei:
        ferry.Loader(d, 2, rank=0, world_size=2)
    msg = str(ei.value)
    assert frag in msg
    assert d in msg, f"error does not name the file: {msg}"
    assert isinstance(ei.value, ferry.FerryError)


def test_missing_directory(tmp_path):
    with pytest.raises(ferry.MissingManifestError, match="no such directory"):
        ferry.Loader(str(tmp_path / "nope"), 2, rank=0, world_size=1)


def test_sha256_verified_on_request(good, tmp_path):
    d = copy_of(good, tmp_path)
    ferry.Loader(d, 2, rank=0, world_size=2, verify="sha256")
    # Corrupt one data byte: same size, magic intact; only the checksum sees it.
    m = ferry.read_manifest(d)
    flip_byte(shard0(d), m.files[0]["batches"][0]["buffers"]["input_ids"]["offset"])
    ferry.Loader(d, 2, rank=0, world_size=2)  # size check alone passes
    with pytest.raises(ferry.ShardError, match="sha256 .* manifest says"):
        ferry.Loader(d, 2, rank=0, world_size=2, verify="sha256")
    with pytest.raises(ValueError, match="verify"):
        ferry.Loader(d, 2, rank=0, world_size=2, verify="md5")


def test_other_shard_checked_when_first_used(good, tmp_path):
    # Rank 0 of 2 maps only shard 0; on another world size shard 1 is mapped
    # (and checked) when the order first reaches it.
    d = copy_of(good, tmp_path)
    remove(os.path.join(d, "rank-00001-of-00002.arrow"))
    list(ferry.Loader(d, 2, rank=0, world_size=2))
    with pytest.raises(ferry.MissingShardError, match="rank-00001-of-00002.arrow"):
        list(ferry.Loader(d, 2, rank=0, world_size=1))


def test_state_mismatch(good, make_shards):
    a = ferry.Loader(good, 2, rank=0, world_size=2)
    st = a.state_dict()
    with pytest.raises(ferry.StateError, match="batch_size"):
        ferry.Loader(good, 4, rank=0, world_size=2).load_state_dict(st)
    with pytest.raises(ferry.StateError, match="seed"):
        ferry.Loader(good, 2, rank=0, world_size=2, seed=99).load_state_dict(st)
    other = make_shards(ranks=2, rows=22, seq_len=8)
    with pytest.raises(ferry.StateError, match="data set"):
        ferry.Loader(other, 2, rank=0, world_size=2).load_state_dict(st)
    with pytest.raises(ferry.StateError, match="not a ferry loader state"):
        a.load_state_dict({"epoch": 1})
    # A state of another world size is fine: that is the point.
    st1 = dict(st, world_size=7)
    ferry.Loader(good, 2, rank=0, world_size=1).load_state_dict(st1)


def test_batch_larger_than_shard(good):
    with pytest.raises(ValueError, match="no batch to yield"):
        ferry.Loader(good, 64, rank=0, world_size=2, drop_last=True)
    ld = ferry.Loader(good, 64, rank=0, world_size=2)
    assert [b["input_ids"].shape[0] for b in ld] == [10]


def test_bad_length_value(good, tmp_path):
    d = copy_of(good, tmp_path)
    m = ferry.read_manifest(d)
    off = m.files[0]["batches"][0]["buffers"]["length"]["offset"] + 4 * 3
    with open(shard0(d), "r+b") as f:
        f.seek(off)
        f.write((10_000).to_bytes(4, "little"))
    ld = ferry.Loader(d, 2, rank=0, world_size=2, shuffle=False)
    with pytest.raises(ferry.ShardError, match=rf"byte {off}: length of row 3 is 10000, want 0..8"):
        list(ld)


def _mutations(rng, m):
    """Yield (description, mutated manifest) pairs: hostile values in every field."""
    import copy

    hostile = [None, -1, 0, 2**63, 1.5, "7", [], {}, True]
    paths = []

    def walk(obj, path):
        if isinstance(obj, dict):
            for k, v in obj.items():
                paths.append(path + [k])
                walk(v, path + [k])
        elif isinstance(obj, list):
            for i, v in enumerate(obj[:2]):
                paths.append(path + [i])
                walk(v, path + [i])

    walk(m, [])
    for _ in range(300):
        mm = copy.deepcopy(m)
        path = rng.choice(paths)
        parent = mm
        for k in path[:-1]:
            parent = parent[k]
        if rng.random() < 0.2 and isinstance(parent, dict):
            del parent[path[-1]]
            yield f"delete {path}", mm
        else:
            v = rng.choice(hostile)
            parent[path[-1]] = v
            yield f"{path} = {v!r}", mm


def test_hostile_manifests_give_ferry_errors_only(good, tmp_path):
    import random

    d = copy_of(good, tmp_path)
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    rng = random.Random(7)
    for what, mm in _mutations(rng, m):
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(mm, f)
        try:
            ld = ferry.Loader(d, 2, rank=0, world_size=2)
            for b in ld:
                pass
            for r in range(2):
                sf = ld.shards.shard(r)
                for row in range(sf.entry["rows"]):
                    sf.segments(row)
        except ferry.FerryError:
            pass
        except Exception as e:  # anything else is a bug: it must be a clear FerryError
            raise AssertionError(f"manifest mutation {what}: {type(e).__name__}: {e}") from e


def test_hostile_shard_bytes_give_ferry_errors_only(good, tmp_path):
    import random

    d = copy_of(good, tmp_path)
    m = ferry.read_manifest(d)
    size = m.files[0]["bytes"]
    with open(shard0(d), "rb") as f:
        orig = f.read()
    rng = random.Random(11)
    for _ in range(100):
        data = bytearray(orig)
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(size)] = rng.randrange(256)
        with open(shard0(d), "wb") as f:
            f.write(data)
        try:
            ld = ferry.Loader(d, 2, rank=0, world_size=2)
            for b in ld:
                pass
            sf = ld.shards.shard(0)
            for row in range(sf.entry["rows"]):
                sf.segments(row)
        except ferry.FerryError:
            pass
