"""Client of the per-node feed daemon ``ferry-serve`` (Go: package serve).

One ``ferry-serve`` per node maps the data set's shards (fetching them from S3
first when needed); every training process connects to its Unix socket and
receives a private, sealed shared-memory ring of batch slots plus an eventfd.
:class:`ServeLoader` has the same API and yields the same batches, in the same
order, as the direct :class:`ferry.MappedLoader`: both are
:class:`ferry.BaseLoader`\ s owning a :class:`ferry.schedule.Schedule`, so
epochs, shuffling, ``state_dict()``/``load_state_dict()``, resume on another
world size and :class:`ferry.DataLoader` work the same, and a state saved by
one resumes the other::

    # on each node:  ferry-serve --data /vol/alpaca-qwen --ranks 0-7 --socket /tmp/ferry.sock &
    loader = ferry.Loader("/vol/alpaca-qwen", 4, serve="/tmp/ferry.sock")  # a ServeLoader
    # or: ferry.ServeLoader("/tmp/ferry.sock", batch_size=4)  (rank/world size as for ferry.Loader)
    for batch in loader:
        batch = ferry.to_device(batch, device)

Protocol (codecs and ring layout in :mod:`ferry.protocol`; drawn in
serve/doc.go, pinned by serve/testdata/protocol.golden.json):
the client sends HELLO, gets WELCOME with the memfd and two eventfds
(SCM_RIGHTS), maps the ring, and sends its plan (PLAN messages: the batches
of the iteration, each a run of rows of one shard, in order, computed by
:mod:`ferry.order` exactly as the direct loader does). The daemon fills batch
n into slot n % slots once that slot is free and adds 1 to the *ready*
eventfd; the client adds the slots it is done with to the *free* eventfd. No
atomics: every hand-over is a system call.

Lifetime of a batch: its tensors are views of one ring slot and stay valid
until the *next* batch is requested (the slot is then refilled). Keep a batch
longer by copying it (``.clone()``, or ``to_device``, which copies anyway).
In DataLoader worker processes batches are cloned before they are yielded,
since torch sends them to the main process asynchronously. With ``slots``
slots, up to ``slots - 1`` batches are prepared ahead while you hold one.

Errors: :class:`DaemonGone` when the daemon exits, is killed or shuts down
(raised within a second: the socket is polled together with the eventfd),
:class:`ServeError` for a request the daemon refuses (its message says why),
:class:`ProtocolError` for a daemon speaking another protocol version. Nothing
is ever created in /dev/shm: the ring is a memfd, gone with the last process
that maps it.
"""

import fcntl
import json
import mmap
import os
import select
import socket
import sys
import time

import numpy as np
import torch
import torch.utils.data

from . import dist
from .errors import DaemonGone, ProtocolError, ServeError  # noqa: F401 (re-exported: ferry.serve_client.X)
from .protocol import (CODE_NOT_SERVED, CODE_SHUTDOWN, COLUMNS, HELLO_SOURCE_IDS, MAX_MSG_SIZE, MAX_ROWS, MAX_RUNS_PER_MSG, MAX_SLOTS,
                       MODE_PACK, MSG_ERROR, MSG_WELCOME, REQUIRED_SEALS, RUN_CONTINUES, SHM_HEADER_SIZE, SLOT_FILLED,
                       _DTYPES, _F_GET_SEALS, _SLOT_HEADER, encode_hello, encode_plan, parse_error, parse_header,
                       parse_msg, parse_welcome)
from .loader import BaseLoader
from .schedule import Schedule
from .shards import Manifest, read_manifest

DEFAULT_SOCKET = "/tmp/ferry-serve.sock"


# -- connection ----------------------------------------------------------------------
class ServeConnection:
    """One connection to ferry-serve: a ring of ``slots`` slots for batches
    of up to ``max_rows`` rows. Low level: :class:`ServeLoader` drives it.

    ``plan(runs)`` queues batches; ``wait()`` blocks until the next planned
    batch is ready and returns ``(slot, rows)``; ``batch(slot, rows)`` gives
    its tensors (views of the ring); ``release()`` hands the oldest batch
    returned by ``wait()`` back to the daemon (releases are written to the
    free eventfd in groups of ``release_every``, and always before
    blocking). With ``sources`` the daemon adds each token's source
    (``source_ids``) to every batch."""

    def __init__(self, path, slots, max_rows, rank=-1, worker=-1, timeout=60.0, sources=False):
        self.path = os.fspath(path)
        self.timeout = timeout
        self.sources = bool(sources)
        self._sock = None
        self._efd = self._free = -1
        self._mm = None
        if not sys.platform.startswith("linux"):
            # The daemon's rings are sealed memfds signalled by eventfds.
            raise ServeError(f"{self.path}: ferry-serve needs Linux: memfd/eventfd (this is {sys.platform}); "
                             "use ferry.Loader without serve= to map the shards directly")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        fds = []
        try:
            sock.settimeout(timeout)
            try:
                sock.connect(self.path)
            except (FileNotFoundError, ConnectionRefusedError) as e:
                raise DaemonGone(
                    f"no ferry-serve at {self.path} ({e.strerror}): start one per node, e.g. "
                    f"`ferry-serve --data DATA_DIR --socket {self.path}`"
                ) from None
            sock.sendall(encode_hello(slots, max_rows, rank, worker, flags=HELLO_SOURCE_IDS if self.sources else 0))
            try:
                msg, fds, _, _ = socket.recv_fds(sock, MAX_MSG_SIZE + 1, 3)
            except socket.timeout:
                raise DaemonGone(f"ferry-serve at {self.path} did not answer within {timeout}s") from None
            if not msg:
                raise DaemonGone(f"ferry-serve at {self.path} closed the connection before answering")
            typ, p = parse_msg(msg)
            if typ == MSG_ERROR:
                code, text = parse_error(p)
                cls = DaemonGone if code == CODE_SHUTDOWN else ServeError
                raise cls(f"{self.path}: {text}", code)
            if typ != MSG_WELCOME or len(fds) != 3:
                raise ProtocolError(f"{self.path}: got message type {typ} with {len(fds)} descriptors, "
                                    "want WELCOME with 3")
            shm_size, info = parse_welcome(p)
            memfd = fds[0]
            seals = fcntl.fcntl(memfd, getattr(fcntl, "F_GET_SEALS", _F_GET_SEALS))
            if seals & REQUIRED_SEALS != REQUIRED_SEALS:
                raise ProtocolError(f"{self.path}: ring memfd seals {seals:#x}, want {REQUIRED_SEALS:#x}")
            size = os.fstat(memfd).st_size
            if size != shm_size or size < SHM_HEADER_SIZE:
                raise ProtocolError(f"{self.path}: ring memfd is {size} bytes, WELCOME says {shm_size}")
            self._mm = mmap.mmap(memfd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            self.layout = parse_header(self._mm, size)
            self.info = json.loads(info)
            os.close(memfd)  # the mapping keeps the ring
            self._efd, self._free = fds[1], fds[2]
            fds = []
        except BaseException:
            sock.close()
            for fd in fds:
                os.close(fd)
            if self._mm is not None:
                self._mm.close()
                self._mm = None
            raise
        sock.settimeout(None)
        self._sock = sock
        self._sockfd = sock.fileno()
        self._poll = select.poll()
        self._poll.register(self._efd, select.POLLIN)
        self._poll.register(self._sockfd, select.POLLIN)
        lay = self.layout
        self._ready = 0        # batches the daemon signalled and wait() has not returned
        self._next = 0         # number of the next batch wait() returns
        self._planned = 0      # batches planned so far
        self._returned = 0     # batches returned by wait() and not yet released
        self._unsent = 0       # released batches not yet written to the free eventfd
        self.release_every = max(1, lay.slots // 4)
        u8 = np.frombuffer(self._mm, dtype=np.uint8)
        self.address, self.size = u8.ctypes.data, len(self._mm)
        del u8
        self._views = []
        for s in range(lay.slots):
            base = lay.slot_offset(s)
            v = {}
            for i, (off, dt, w) in enumerate(lay.columns):
                if off:
                    a = np.frombuffer(self._mm, dtype=_DTYPES[dt], count=lay.max_rows * w, offset=base + off)
                    v[COLUMNS[i]] = torch.from_numpy(a.reshape(lay.max_rows, w) if w > 1 else a)
            self._views.append(v)
        self._full = {}  # (attention_mask) -> per-slot dicts of whole-slot views

    @property
    def slots(self):
        return self.layout.slots

    @property
    def planned_ahead(self):
        """Batches planned and not yet returned by wait()."""
        return self._planned - self._next

    @property
    def idle(self):
        """True when nothing is planned ahead and nothing is held."""
        return self._planned == self._next and self._returned == 0

    def plan(self, runs):
        """Queue batches: runs of (file, row, rows, flags) (an (n, 4) uint32
        array or a sequence); a run with flags RUN_CONTINUES continues its
        batch in the next run. Returns the number of batches queued."""
        if self._sock is None:
            raise ServeError(f"{self.path}: connection closed")
        runs = np.ascontiguousarray(runs, dtype="<u4").reshape(-1, 4)
        batches = int(np.count_nonzero((runs[:, 3] & RUN_CONTINUES) == 0))
        for i in range(0, len(runs), MAX_RUNS_PER_MSG):
            try:
                self._sock.send(encode_plan(runs[i:i + MAX_RUNS_PER_MSG]))
            except OSError as e:
                self._check_socket()
                raise DaemonGone(f"ferry-serve at {self.path}: connection lost ({e})") from None
        self._planned += batches
        return batches

    def wait(self):
        """Block until the next planned batch is ready; return (slot, rows)."""
        if self._next >= self._planned:
            raise ServeError(f"{self.path}: wait() with no batch planned")
        if not self._ready:
            self._wait_ready()
        self._ready -= 1
        seq = self._next
        slot = seq % self.layout.slots
        hseq, rows, state = _SLOT_HEADER.unpack_from(self._mm, self.layout.slot_offset(slot))
        if hseq != seq or state != SLOT_FILLED:
            raise ProtocolError(f"{self.path}: slot {slot} holds batch {hseq} (state {state}), want batch {seq} filled")
        self._next = seq + 1
        self._returned += 1
        return slot, rows

    def release(self, n=1):
        """Hand the n oldest batches returned by wait() back to the daemon."""
        if n > self._returned:
            raise ServeError(f"{self.path}: release({n}) with {self._returned} batches held")
        self._returned -= n
        self._unsent += n
        if self._unsent >= self.release_every:
            self._flush()

    def _flush(self):
        if self._unsent:
            os.eventfd_write(self._free, self._unsent)
            self._unsent = 0

    def _wait_ready(self):
        try:
            self._ready += os.eventfd_read(self._efd)
            return
        except BlockingIOError:
            pass
        self._flush()  # never sit on released slots while waiting for one
        deadline = None if not self.timeout else time.monotonic() + self.timeout
        while True:
            for fd, _ in self._poll.poll(1000):
                if fd == self._sockfd:
                    self._check_socket()
            try:
                self._ready += os.eventfd_read(self._efd)
                return
            except BlockingIOError:
                pass
            if deadline is not None and time.monotonic() > deadline:
                raise ServeError(f"ferry-serve at {self.path}: no batch within {self.timeout}s "
                                 "(daemon alive but stuck? see its log)")

    def _check_socket(self):
        """Raise the daemon's error if the socket has one (or EOF)."""
        try:
            msg = self._sock.recv(MAX_MSG_SIZE + 1, socket.MSG_DONTWAIT)
            why = "EOF"
        except BlockingIOError:
            return
        except OSError as e:
            msg, why = b"", str(e)
        if not msg:
            raise DaemonGone(f"ferry-serve at {self.path} closed the connection ({why}): the daemon exited or was "
                             "killed; restart it and resume from your last checkpoint")
        typ, p = parse_msg(msg)
        if typ == MSG_ERROR:
            code, text = parse_error(p)
            cls = DaemonGone if code == CODE_SHUTDOWN else ServeError
            raise cls(f"{self.path}: {text}", code)
        raise ProtocolError(f"{self.path}: unexpected message type {typ} from ferry-serve")

    def batch(self, slot, rows, attention_mask=True, copy=False):
        """The batch dict of a ready slot: views of the ring (or copies)."""
        full = self._full.get(attention_mask)
        if full is None:
            full = self._full[attention_mask] = [self._make(s, self.layout.max_rows, attention_mask)
                                                  for s in range(self.layout.slots)]
        out = dict(full[slot]) if rows == self.layout.max_rows else self._make(slot, rows, attention_mask)
        if copy:
            out = {k: t.clone() for k, t in out.items()}
        return out

    def _make(self, slot, rows, attention_mask):
        v = self._views[slot]
        if self.layout.mode == MODE_PACK:
            keys = ("input_ids", "labels", "position_ids")
        elif attention_mask:
            keys = ("input_ids", "attention_mask", "labels")
        else:
            keys = ("input_ids", "length", "labels")
        if self.sources:
            keys += ("source_ids",)
        return {k: v[k][:rows] for k in keys}

    def column(self, slot, rows, name):
        """One column of a ready slot (e.g. "sample", "length"), a view."""
        return self._views[slot][name][:rows]

    def close(self):
        """Disconnect; the daemon frees the ring. Tensors already handed out
        keep the mapping alive and stay readable."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for fd in (self._efd, self._free):
            if fd >= 0:
                os.close(fd)
        self._efd = self._free = -1
        self._views = []
        self._full = {}
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # tensors still view the ring; the mapping goes with them
            self._mm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# -- loader --------------------------------------------------------------------------
class _InfoManifest:
    """The manifest as the daemon describes it (no per-batch buffers)."""

    fingerprint = Manifest.fingerprint

    def __init__(self, info, path):
        self.raw = info
        self.path = path
        try:
            self.seq_len = int(info["seq_len"])
            self.mode = info["mode"]
            self.ranks = int(info["ranks"])
            self.rows_per_rank = int(info["rows_per_rank"])
            self.batch_rows = int(info["batch_rows"])
            self.files = list(info["files"])
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"{path}: dataset description from the daemon lacks {e}") from None
        self.total_rows = info.get("total_rows", self.ranks * self.rows_per_rank)
        self.unique_rows = info.get("unique_rows", self.total_rows)
        self.drop_last = bool(info.get("drop_last", False))
        self.seed = info.get("seed", 0)
        self.labels = info.get("labels")
        self.tokenizer = info.get("tokenizer") or {}
        self.stats = info.get("stats") or {}
        self.sources = info.get("sources") or []
        self.served_ranks = list(info.get("served_ranks", range(self.ranks)))


class ServeLoader(BaseLoader):
    """A :class:`ferry.BaseLoader` fed by ``ferry-serve`` instead of mapping the
    shards itself: same arguments (minus the path, plus the socket), same
    batches, same order, same state.

    Args:
        socket: the daemon's socket (default ``$FERRY_SERVE_SOCKET`` or
            /tmp/ferry-serve.sock).
        batch_size, rank, world_size, shuffle, seed, drop_last,
        attention_mask: as for :class:`ferry.MappedLoader`.
        grad_accum, num_items_in_batch: as for :class:`ferry.MappedLoader`; the
            loss tokens are counted from the shards in ``data_dir``.
        data_dir: a local copy of the data set's dataprep directory
            (``Loader(path, serve=...)`` passes ``path``): checked against
            the daemon's data set (manifest fingerprint) and read to count
            every rank's loss tokens for ``num_items_in_batch``. Without it
            batches carry no ``num_items_in_batch`` (a warning says so).
        slots: ring slots per process (default 8: up to 7 batches prepared
            ahead while you hold one).
        timeout: seconds to wait for the daemon to answer (default 60; a dead
            daemon is reported at once regardless).
        sources: add ``source_ids`` to every batch, as
            :class:`ferry.MappedLoader` does (the daemon fills the column).
    """

    def __init__(self, socket=None, batch_size=None, *, rank=None, world_size=None, shuffle=True, seed=None,
                 drop_last=False, attention_mask=True, grad_accum=1, num_items_in_batch=None, data_dir=None,
                 slots=8, timeout=60.0, plan_chunk=1024, sources=False, serve=None):
        if serve is not None:
            raise TypeError("ServeLoader does not take serve=: its first argument is the socket "
                            "(or use ferry.Loader(path, ..., serve=SOCKET))")
        super().__init__()
        if batch_size is None:
            raise TypeError("ServeLoader needs batch_size")
        self.socket_path = os.fspath(socket or os.environ.get("FERRY_SERVE_SOCKET") or DEFAULT_SOCKET)
        if int(batch_size) > MAX_ROWS:
            raise ValueError(f"batch_size = {batch_size}: ferry-serve batches hold at most {MAX_ROWS} rows")
        self.slots = int(slots)
        if not 2 <= self.slots <= MAX_SLOTS:
            raise ValueError(f"slots = {slots}, want 2..{MAX_SLOTS} (one held + at least one ahead)")
        self.timeout = timeout
        self.plan_chunk = int(plan_chunk)
        info = dist.resolve(rank, world_size)
        self.rank, self.world_size = info.rank, info.world_size
        self.attention_mask = bool(attention_mask)
        self.sources = bool(sources)
        self.prefetch = False
        self.copies = 0
        self._conn = None
        self._pid = None
        if int(batch_size) < 1:
            raise ValueError(f"batch_size = {batch_size}, want >= 1")
        self._batch_rows = int(batch_size)
        conn = self._connect(-1)
        try:
            m = self.manifest = _InfoManifest(conn.info, f"ferry-serve:{self.socket_path}")
            self.source_names = [s["name"] for s in m.sources] or ["data"]
            self._sched = Schedule(m, batch_size, self.rank, self.world_size, shuffle=shuffle, seed=seed,
                                   drop_last=drop_last, grad_accum=grad_accum)
            if self.world_size == m.ranks and self.rank not in m.served_ranks:
                raise ServeError(f"{self.socket_path}: rank {self.rank}'s shard is not served by this daemon (it "
                                 f"serves {m.served_ranks}); start it with --ranks covering this node's ranks",
                                 CODE_NOT_SERVED)
            self._pack = m.mode == "pack"
            local = None
            if data_dir is not None and os.path.isfile(os.path.join(os.fspath(data_dir), "manifest.json")):
                mine = read_manifest(data_dir)
                if mine.fingerprint() != m.fingerprint():
                    raise ServeError(
                        f"{data_dir}: ferry-serve at {self.socket_path} serves another data set (manifest "
                        f"fingerprint {m.fingerprint()}, this directory has {mine.fingerprint()}): "
                        "start the daemon with --data on this directory", CODE_NOT_SERVED
                    )
                local = os.fspath(data_dir)
            self._sched.count_loss_tokens(num_items_in_batch, local)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_loader_args(cls, serve, path, batch_size, *, verify="size", prefetch=True, **kwargs):
        """``ferry.Loader(path, batch_size, ..., serve=serve)``: a ServeLoader
        on socket ``serve`` (``True``: the default socket) taking the direct
        loader's arguments. ``path`` (may be None) must name the data set
        the daemon serves: when it is a local directory with a manifest,
        its fingerprint is compared with the daemon's (an s3:// prefix or a
        path this process cannot read is not checked)."""
        if verify not in ("size", "sha256"):
            raise ValueError(f"verify = {verify!r}, want 'size' or 'sha256'")
        if verify == "sha256":
            raise ValueError("verify='sha256' with serve=: the daemon maps the shards, so it checks them; "
                             "start it with `ferry-serve --verify`")
        sock = None if serve is True else os.fspath(serve)
        loader = cls(sock, batch_size, data_dir=path, **kwargs)
        loader.path = None if path is None else os.fspath(path)
        return loader

    def _connect(self, worker):
        """This process's connection (a new one after fork: never share)."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self._conn is not None:
            # Inherited through fork: close this process's copies only (the
            # parent keeps its connection), so the daemon sees the parent's
            # exit as an EOF even while workers live.
            self._conn.close()
        self._conn = ServeConnection(self.socket_path, self.slots, self._batch_rows, rank=self.rank,
                                     worker=worker, timeout=self.timeout, sources=self.sources)
        self._pid = os.getpid()
        return self._conn

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_conn"] = None
        state["_pid"] = None
        return state

    @property
    def connection(self):
        """The current process's :class:`ServeConnection` (for tests/tools)."""
        return self._connect(-1)

    def __iter__(self):
        sched = self._sched
        cur = sched.begin()
        W, w, n = self.world_size, self.rank, cur.batches
        wi = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if wi is None else (wi.id, wi.num_workers)
        copy = wi is not None  # batches leave a worker asynchronously: never hand out ring views there
        conn = self._connect(-1 if wi is None else wid)
        if not conn.idle:
            # An earlier loop stopped early: its plan is still queued in the
            # daemon. A fresh connection is the cheapest way to drop it.
            conn.close()
            self._conn = None
            conn = self._connect(-1 if wi is None else wid)
        us = range(wid, n, nw)
        chunk = max(self.plan_chunk, conn.slots)
        planned = 0  # index into us

        def plan_more():
            nonlocal planned
            part = us[planned:planned + chunk]
            runs = np.empty((len(part), 4), dtype="<u4")
            for i, u in enumerate(part):
                runs[i, 0], runs[i, 1], runs[i, 2] = cur.block(u, W, w)
            runs[:, 3] = 0
            conn.plan(runs)
            planned += len(part)

        plan_more()
        for k, u in enumerate(us):
            if planned < len(us) and planned - k < chunk // 2:
                plan_more()
            slot, rows = conn.wait()
            batch = conn.batch(slot, rows, self.attention_mask, copy)
            sched.extras(batch, batch.get("position_ids"), self._pack, cur, u)
            sched.advance(cur, u + 1)
            yield batch
            # The caller asked for the next batch: the one just yielded is
            # released and its slot can be refilled.
            conn.release()

    def close(self):
        """Disconnect from the daemon (tensors already yielded stay readable)."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None
