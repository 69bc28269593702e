"""Tests of the ferry-serve daemon through its Python client.

They start bin/ferry-serve (built from ./cmd/ferry-serve once per session;
$FERRY_SERVE_BIN names a prebuilt one) on shards made by the repository's
synthetic generator, and check the protocol against the golden file that the
Go tests check too."""

import gc
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import ferry
from ferry import protocol as sc
from ferry.serve_client import DaemonGone, ServeError, ServeLoader

from helpers import REPO, Daemon

GOLDEN = os.path.join(REPO, "serve", "testdata", "protocol.golden.json")


# -- fixtures ---------------------------------------------------------------------------
@pytest.fixture
def daemon(serve_bin, tmp_path):
    started = []

    def start(data, *args, sock=None):
        d = Daemon(serve_bin, data, sock or str(tmp_path / f"serve{len(started)}.sock"), args)
        started.append(d)
        return d

    yield start
    for d in started:
        d.kill(signal.SIGTERM)


def ring_maps(pid):
    """Mappings of ferry-serve rings and of any /dev/shm file in process pid,
    leaving out the POSIX semaphores (/dev/shm/sem.*) that Python's
    multiprocessing locks map (tqdm, which transformers and datasets import,
    makes one): they are not ferry's."""
    with open(f"/proc/{pid}/maps") as fh:
        lines = fh.read().splitlines()
    return ([l for l in lines if "memfd:ferry-serve" in l],
            [l for l in lines if "/dev/shm/" in l and "/dev/shm/sem." not in l])


def ring_fds(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:ferry-serve"):
                n += 1
        except OSError:
            pass
    return n


def dev_shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def same_batches(a, b, where=""):
    assert list(a) == list(b), where
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), f"{where} {k}"
        else:
            assert type(a[k]) is type(b[k]) and a[k] == b[k], f"{where} {k}"


def kept(batch):
    """A batch that outlives its ring slot (tensors cloned)."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


# -- protocol golden ------------------------------------------------------------------------
def test_protocol_golden():
    g = json.load(open(GOLDEN))
    assert g["version"] == sc.VERSION
    assert g["msg_magic"] == sc.MSG_MAGIC and g["msg_header_size"] == sc.MSG_HEADER.size
    assert g["max_msg_size"] == sc.MAX_MSG_SIZE and g["max_rows"] == sc.MAX_ROWS and g["max_slots"] == sc.MAX_SLOTS
    assert g["max_runs_per_msg"] == sc.MAX_RUNS_PER_MSG and g["max_plan_ahead"] == sc.MAX_PLAN_AHEAD
    assert g["run_continues"] == sc.RUN_CONTINUES
    assert g["shm_magic"].encode() == sc.SHM_MAGIC and g["shm_header_size"] == sc.SHM_HEADER_SIZE
    assert g["shm_column_table_offset"] == sc.SHM_COLUMN_TABLE_OFFSET
    assert g["shm_column_entry_size"] == sc.SHM_COLUMN_ENTRY_SIZE
    assert g["slot_header_size"] == sc.SLOT_HEADER_SIZE == sc._SLOT_HEADER.size + 48
    assert g["slot_align"] == sc.SLOT_ALIGN and g["column_align"] == sc.COLUMN_ALIGN
    assert g["msg_types"] == {"hello": sc.MSG_HELLO, "welcome": sc.MSG_WELCOME, "plan": sc.MSG_PLAN,
                              "error": sc.MSG_ERROR, "file": sc.MSG_FILE, "file_data": sc.MSG_FILE_DATA}
    assert g["error_codes"] == {"bad_request": sc.CODE_BAD_REQUEST, "not_served": sc.CODE_NOT_SERVED,
                                "limit": sc.CODE_LIMIT, "shutdown": sc.CODE_SHUTDOWN, "io": sc.CODE_IO}
    assert g["dtypes"] == {"int32": sc.DTYPE_INT32, "int64": sc.DTYPE_INT64}
    assert g["columns"] == list(sc.COLUMNS) and sc.COLUMNS[sc.COL_SOURCE_IDS] == "source_ids"
    assert g["hello_flags"] == {"source_ids": sc.HELLO_SOURCE_IDS}

    m = g["messages"]
    f = m["hello"]["fields"]
    assert sc.encode_hello(f["slots"], f["max_rows"], f["rank"], f["worker"], f["version"]).hex() == m["hello"]["hex"]
    f = m["hello_sources"]["fields"]
    assert sc.encode_hello(f["slots"], f["max_rows"], f["rank"], f["worker"], f["version"],
                           flags=f["flags"]).hex() == m["hello_sources"]["hex"]
    f = m["welcome"]["fields"]
    assert sc.encode_welcome(f["shm_size"], f["info"].encode(), f["version"]).hex() == m["welcome"]["hex"]
    typ, p = sc.parse_msg(bytes.fromhex(m["welcome"]["hex"]))
    assert typ == sc.MSG_WELCOME and sc.parse_welcome(p) == (f["shm_size"], f["info"].encode())
    f = m["plan"]["fields"]
    assert sc.encode_plan(f["runs"]).hex() == m["plan"]["hex"]
    # model files (load_pretrained through the daemon: ferry.weights_client)
    f = m["file"]["fields"]
    assert sc.encode_file_request(f["path"], f["file"], f["offset"], f["length"]).hex() == m["file"]["hex"]
    for name in ("file_data", "file_data_missing"):
        typ, p = sc.parse_msg(bytes.fromhex(m[name]["hex"]))
        assert typ == sc.MSG_FILE_DATA and sc.parse_file_data(p) == m[name]["fields"], name
    f = m["error"]["fields"]
    assert sc.encode_error(f["code"], f["text"]).hex() == m["error"]["hex"]
    typ, p = sc.parse_msg(bytes.fromhex(m["error"]["hex"]))
    assert typ == sc.MSG_ERROR and sc.parse_error(p) == (f["code"], f["text"])

    for name, lay in g["layouts"].items():
        p = lay["params"]
        L = sc.Layout(p["slots"], p["max_rows"], p["seq_len"], p["mode"], p["flags"])
        assert L.slot_size == lay["slot_size"] and L.total_size == lay["total_size"], name
        assert [list(c) for c in L.columns] == [[c["offset"], c["dtype"], c["width"]] for c in lay["columns"]], name
        hdr = L.header()
        assert hdr[:192].hex() == lay["header_hex"] and hdr[192:] == bytes(len(hdr) - 192), name
        assert sc.parse_header(hdr, L.total_size).columns == L.columns
        sh = lay["slot_header"]
        b = sc._SLOT_HEADER.pack(sh["seq"], sh["rows"], sh["state"]) + bytes(48)
        assert b.hex() == lay["slot_header_hex"], name
    assert g["layouts"]["pack_sources"]["params"]["flags"] == sc.HELLO_SOURCE_IDS  # the source_ids column is pinned


@pytest.mark.parametrize("mess", ["magic", "version", "slot_size", "column", "reserved", "size"])
def test_parse_header_rejects(mess):
    L = sc.Layout(3, 4, 8, sc.MODE_PAD)
    b = bytearray(L.header())
    size = L.total_size
    if mess == "magic":
        b[0] ^= 1
    elif mess == "version":
        b[8] = 2
    elif mess == "slot_size":
        b[32] ^= 0x10
    elif mess == "column":
        b[64 + 16 * 2 + 8] = sc.DTYPE_INT64
    elif mess == "reserved":
        b[4000] = 1
    else:
        size -= 1
    with pytest.raises(sc.ProtocolError):
        sc.parse_header(bytes(b), size)


def test_parse_msg_rejects():
    good = sc.encode_hello(2, 2)
    for bad in (good[:10], b"XXXX" + good[4:], good + b"\0", good[:6] + b"\1\0" + good[8:]):
        with pytest.raises(sc.ProtocolError):
            sc.parse_msg(bad)


# -- batches --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,world,kw", [("pad", 2, {}), ("pack", 2, {}), ("pad", 3, {}),
                                           ("pad", 2, {"attention_mask": False, "drop_last": True}),
                                           ("pad", 1, {"shuffle": False, "seed": 5})])
def test_same_batches_as_direct_loader(make_shards, daemon, mode, world, kw):
    data = make_shards(2, 61, seq_len=16, mode=mode, extra=("-batch-rows", "8"))
    d = daemon(data)
    for rank in range(world):
        direct = ferry.Loader(data, 4, rank=rank, world_size=world, **kw)
        served = ServeLoader(d.sock, 4, rank=rank, world_size=world, data_dir=data, **kw)
        assert len(served) == len(direct)
        for epoch in (0, 1):
            direct.set_epoch(epoch)
            served.set_epoch(epoch)
            want = [kept(b) for b in direct]
            n = 0
            for a, b in zip(want, served):
                same_batches(a, b, f"rank {rank} epoch {epoch} batch {n}")
                n += 1
            assert n == len(want) > 0
            assert served.state_dict() == direct.state_dict()
        served.close()


def test_held_batch_is_not_overwritten(make_shards, daemon):
    """The batch in hand stays intact while the daemon fills ahead, up to the
    next request, with the smallest ring."""
    data = make_shards(2, 200, seq_len=32)
    d = daemon(data)
    direct = ferry.Loader(data, 4, rank=0, world_size=2)
    served = ServeLoader(d.sock, 4, rank=0, world_size=2, slots=2, data_dir=data)
    n = 0
    for a, b in zip(direct, served):
        time.sleep(0.002)  # give the daemon every chance to run ahead
        same_batches(a, b, f"batch {n}")
        n += 1
    assert n == len(direct) > 10


def test_zero_copy_views_of_the_ring(make_shards, daemon):
    data = make_shards(2, 80, seq_len=16)
    d = daemon(data)
    loader = ServeLoader(d.sock, 4, rank=1, world_size=2, slots=3)
    conn = loader.connection
    assert len(loader) > 6
    ptrs = set()
    for i, batch in enumerate(loader):
        for k, t in batch.items():
            assert conn.address <= t.data_ptr() < conn.address + conn.size, k
            assert t.data_ptr() + t.numel() * t.element_size() <= conn.address + conn.size, k
        ptrs.add(batch["input_ids"].data_ptr())
        if i == 5:
            break
    assert len(ptrs) == 3  # batches rotate through the 3 slots
    memfd_maps, shm_maps = ring_maps(os.getpid())
    assert memfd_maps and not shm_maps
    loader.close()


def test_resume_at_random_points(make_shards, daemon):
    data = make_shards(3, 90, seq_len=8, extra=("-batch-rows", "4"))
    d = daemon(data)
    rng = random.Random(7)
    full = ferry.Loader(data, 2, rank=1, world_size=3)
    want = []
    for epoch in (0, 1):
        full.set_epoch(epoch)
        want += [b["input_ids"].clone() for b in full]
    for _ in range(4):
        stop = rng.randrange(1, len(want) - 1)
        first = ServeLoader(d.sock, 2, rank=1, world_size=3)
        got = []
        while len(got) < stop:
            for b in first:
                got.append(b["input_ids"].clone())
                if len(got) == stop:
                    break
        state = first.state_dict()
        first.close()
        # Resume through the daemon, or through the direct loader: same state format.
        for cls in (lambda: ServeLoader(d.sock, 2, rank=1, world_size=3), lambda: ferry.Loader(data, 2, rank=1, world_size=3)):
            again = cls()
            again.load_state_dict(state)
            rest = got.copy()
            while len(rest) < len(want):
                for b in again:
                    rest.append(b["input_ids"].clone())
            assert all(torch.equal(a, b) for a, b in zip(rest, want)), f"resume at {stop}"


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_workers(make_shards, daemon, workers):
    data = make_shards(2, 50, seq_len=8)
    d = daemon(data)
    want = [b["input_ids"].clone() for b in ferry.Loader(data, 4, rank=0, world_size=2)]
    dl = ferry.DataLoader(ServeLoader(d.sock, 4, rank=0, world_size=2), num_workers=workers)
    got = [b["input_ids"].clone() for b in dl]
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def test_eight_local_ranks_at_once(make_shards, daemon):
    """Eight ranks (clients with their own connection and ring, driven from
    eight threads here to spare eight torch imports) iterate concurrently."""
    data = make_shards(8, 8 * 40, seq_len=64, extra=("-batch-rows", "16"))
    d = daemon(data)
    served = [ServeLoader(d.sock, 4, rank=r, world_size=8, data_dir=data) for r in range(8)]
    for s in served:
        s.connection  # connect all eight before anyone starts
    memfd_maps, shm_maps = ring_maps(d.pid)
    assert len(memfd_maps) == 8 and not shm_maps
    # The daemon closes its copy of each ring's descriptor right after sending
    # it, which may be a moment after the client has received it.
    deadline = time.monotonic() + 5
    while ring_fds(d.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ring_fds(d.pid) == 0
    errors, counts = [], [0] * 8
    start = threading.Barrier(8)

    def run(r):
        try:
            direct = ferry.Loader(data, 4, rank=r, world_size=8)
            start.wait()
            for epoch in range(3):
                served[r].set_epoch(epoch)
                direct.set_epoch(epoch)
                for a, b in zip(direct, served[r]):
                    same_batches(a, b, f"rank {r} epoch {epoch}")
                    counts[r] += 1
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert counts == [30] * 8
    for s in served:
        s.close()
    deadline = time.monotonic() + 10
    while ring_maps(d.pid)[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ring_maps(d.pid) == ([], [])


# -- failures -------------------------------------------------------------------------------
HOLD = r"""
import sys, time
from ferry.serve_client import ServeLoader
loader = ServeLoader(sys.argv[1], 4, rank=0, world_size=2)
it = iter(loader)
next(it)
print("holding", flush=True)
time.sleep(600)
"""


def test_client_sigkill_frees_its_ring(make_shards, daemon):
    data = make_shards(2, 40, seq_len=16)
    d = daemon(data)
    shm_before = dev_shm()
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__))))
    p = subprocess.Popen([sys.executable, "-c", HOLD, d.sock], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "holding"
        assert len(ring_maps(d.pid)[0]) == 1 and len(ring_maps(p.pid)[0]) == 1
        assert ring_fds(p.pid) == 1  # Python's mmap object keeps one dup of the memfd
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 10
    while ring_maps(d.pid)[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ring_maps(d.pid) == ([], []) and ring_fds(d.pid) == 0
    assert d.proc.poll() is None  # the daemon serves on
    assert not {n for n in dev_shm() - shm_before if "ferry" in n}
    loader = ServeLoader(d.sock, 4, rank=0, world_size=2)
    assert sum(1 for _ in loader) == len(loader)


def test_daemon_sigkill_raises_at_once(make_shards, daemon):
    data = make_shards(2, 400, seq_len=16)
    d = daemon(data)
    shm_before = dev_shm()
    gc.collect()  # rings of earlier tests' loaders that only a cycle kept
    rings_before = len(ring_maps(os.getpid())[0])
    loader = ServeLoader(d.sock, 4, rank=0, world_size=2, timeout=600, slots=2)
    assert len(loader) > 10
    it = iter(loader)
    next(it)
    d.kill(signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(DaemonGone, match="closed the connection"):
        for _ in range(100):
            next(it)
    elapsed = time.monotonic() - t0
    print(f"DaemonGone raised {elapsed * 1000:.1f} ms after SIGKILL")
    assert elapsed < 600  # not the timeout path (the message above says so too)
    it.close()
    loader.close()
    del it, loader
    gc.collect()
    assert len(ring_maps(os.getpid())[0]) == rings_before  # our ring is gone: nothing survives
    assert not {n for n in dev_shm() - shm_before if "ferry" in n}
    # The killed daemon left its socket file; a new one replaces it.
    assert os.path.exists(d.sock)
    d2 = daemon(data, sock=d.sock)
    assert sum(1 for _ in ServeLoader(d2.sock, 4, rank=0, world_size=2)) > 0


def test_sigterm_stops_cleanly(make_shards, daemon):
    data = make_shards(2, 200, seq_len=16, mode="pack")
    d = daemon(data)
    loader = ServeLoader(d.sock, 2, rank=1, world_size=2, slots=2)
    assert len(loader) > 3
    it = iter(loader)
    next(it)
    assert d.kill(signal.SIGTERM) == 0, d.output()
    with pytest.raises(DaemonGone, match="shutting down"):
        for _ in range(100):
            next(it)
    assert not os.path.exists(d.sock)
    assert "stopped" in d.output()
    with pytest.raises(DaemonGone, match="no ferry-serve at"):
        ServeLoader(d.sock, 2, rank=1, world_size=2)


def test_shard_not_served(make_shards, daemon):
    data = make_shards(2, 40, seq_len=8)
    d = daemon(data, "--ranks", "0")
    assert sum(1 for _ in ServeLoader(d.sock, 4, rank=0, world_size=2)) > 0
    with pytest.raises(ServeError, match="not served") as e:
        ServeLoader(d.sock, 4, rank=1, world_size=2)
    assert e.value.code == sc.CODE_NOT_SERVED
    # On another world size rank 0 needs shard 1 too: the daemon says so.
    loader = ServeLoader(d.sock, 4, rank=0, world_size=1)
    with pytest.raises(ServeError, match="shard 1") as e:
        list(loader)
    assert e.value.code == sc.CODE_NOT_SERVED and not isinstance(e.value, DaemonGone)


def test_daemon_refuses_bad_data(serve_bin, make_shards, tmp_path):
    data = make_shards(2, 20, seq_len=8)
    os.remove(os.path.join(data, "rank-00001-of-00002.arrow"))
    r = subprocess.run([serve_bin, "--data", data, "--socket", str(tmp_path / "x.sock")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "rank-00001-of-00002.arrow" in r.stderr
    # without --data the daemon serves model files only (ferry.load_pretrained):
    # a feed client is told so
    d = Daemon(serve_bin, None, str(tmp_path / "y.sock"))
    try:
        with pytest.raises(ServeError, match="serves no data set") as e:
            ServeLoader(d.sock, 4, rank=0, world_size=1)
        assert e.value.code == sc.CODE_NOT_SERVED
    finally:
        d.kill()


def test_request_over_limit(make_shards, daemon):
    data = make_shards(1, 10, seq_len=1024)
    d = daemon(data, "--max-client-bytes", "1000000")
    with pytest.raises(ServeError, match="max-client-bytes") as e:
        ServeLoader(d.sock, 64, rank=0, world_size=1, slots=8)
    assert e.value.code == sc.CODE_LIMIT


# -- ferry.Loader(..., serve=) ------------------------------------------------------------------
def test_loader_serve_argument(make_shards, daemon, monkeypatch):
    """One argument switches a trainer to the daemon: same kwargs, same
    batches, same order and state as the direct loader."""
    data = make_shards(2, 61, seq_len=16, extra=("-batch-rows", "8"))
    d = daemon(data)
    assert ferry.ServeLoader is ServeLoader and ferry.ServeError is ServeError and ferry.DaemonGone is DaemonGone
    kw = dict(rank=1, world_size=2, seed=3, drop_last=True, attention_mask=False)
    direct = ferry.Loader(data, 4, **kw)
    served = ferry.Loader(data, 4, serve=d.sock, prefetch=False, slots=3, **kw)
    assert type(served) is ServeLoader and isinstance(served, ferry.BaseLoader)
    assert served.connection.slots == 3 and served.path == data and served.socket_path == d.sock
    assert len(served) == len(direct) > 3
    for epoch in (0, 1):
        direct.set_epoch(epoch)
        served.set_epoch(epoch)
        n = 0
        for a, b in zip([kept(b) for b in direct], served):
            same_batches(a, b, f"epoch {epoch} batch {n}")
            n += 1
        assert n == len(direct) and served.state_dict() == direct.state_dict()
    served.close()

    # serve=True: the socket from $FERRY_SERVE_SOCKET; path may be None:
    # then the loss tokens of the other ranks cannot be counted here.
    monkeypatch.setenv("FERRY_SERVE_SOCKET", d.sock)
    with pytest.warns(UserWarning, match="no num_items_in_batch.*no local copy of the data set directory"):
        served = ferry.Loader(None, 4, serve=True, **kw)
    assert served.socket_path == d.sock and served.path is None
    b = next(iter(served))
    want = next(iter(direct))
    assert want.pop("num_items_in_batch") is not None
    same_batches(b, want)
    served.close()
    with pytest.raises(ValueError, match="no local copy"):
        ferry.Loader(None, 4, serve=True, num_items_in_batch=True, **kw)
    # serve=None, False or "" (an unset config value): the direct loader.
    for off in (None, False, ""):
        assert type(ferry.Loader(data, 4, serve=off, **kw)) is ferry.MappedLoader


def test_loader_serve_argument_errors(make_shards, daemon, tmp_path):
    data = make_shards(2, 40, seq_len=8)
    other = make_shards(2, 41, seq_len=8)
    d = daemon(data)
    # A local path must name the data set the daemon serves.
    with pytest.raises(ServeError, match="serves another data set") as e:
        ferry.Loader(other, 4, rank=0, world_size=2, serve=d.sock)
    assert e.value.code == sc.CODE_NOT_SERVED
    # sha256 verification is the daemon's (--verify), not silently skipped.
    with pytest.raises(ValueError, match="ferry-serve --verify"):
        ferry.Loader(data, 4, rank=0, world_size=2, serve=d.sock, verify="sha256")
    with pytest.raises(ValueError, match="verify"):
        ferry.Loader(data, 4, rank=0, world_size=2, serve=d.sock, verify="md5")
    # Serve-only arguments without serve= are refused by the direct loader.
    with pytest.raises(TypeError):
        ferry.Loader(data, 4, rank=0, world_size=2, slots=3)
    with pytest.raises(TypeError, match="serve="):
        ServeLoader(d.sock, 4, rank=0, world_size=2, serve=d.sock)
    # No daemon on that socket: DaemonGone, naming the socket and the fix.
    with pytest.raises(DaemonGone, match="no ferry-serve at .*nope.sock"):
        ferry.Loader(data, 4, rank=0, world_size=2, serve=str(tmp_path / "nope.sock"))


def test_serve_mode_refuses_other_systems(monkeypatch, tmp_path):
    """Off Linux (no memfd/eventfd) serve= fails at once with what to do,
    not with an obscure socket or fcntl error."""
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(ServeError, match=r"ferry-serve needs Linux: memfd/eventfd \(this is darwin\); use "
                                         r"ferry.Loader without serve="):
        ServeLoader(str(tmp_path / "ferry.sock"), 4, rank=0, world_size=1)
