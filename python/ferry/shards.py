"""Reading a dataprep output directory: manifest.json and the mapped shards.

Layout (docs/shard-format.md is the contract)::

    OUT/
      manifest.json                  written last; absent = not a result
      rank-00000-of-00002.arrow      Arrow IPC file, one per dataprep rank
      rank-00001-of-00002.arrow

    one shard file, as mapped (offsets are absolute, from the manifest):

    0        8                                              bytes-6  bytes
    +--------+-------------------------------------------------+------+
    |ARROW1\0\0| schema msg | record batch 0 | record batch 1 | ... |footer|ARROW1|
    +--------+-------------------------------------------------+------+
                              |
                              +-- input_ids values   rows*L int32   (offset o1)
                              +-- labels values      rows*L int32   (offset o2)
                              +-- position_ids       rows*L int32   (pack only)
                              +-- length             rows   int32
                              +-- segments.offsets   rows+1 int32
                              +-- segments.sample    nseg   int64
                              +-- segments.start     nseg   int32
                              +-- segments.length    nseg   int32

Global position p (0 <= p < total_rows) lives in shard p % ranks, row
p // ranks.

No pyarrow is needed: the manifest gives every buffer's absolute offset, so a
column of a record batch is ``np.frombuffer(mapping, np.int32, count, offset)``.
When pyarrow is importable, :meth:`ShardSet.check_arrow` cross-checks a shard's
schema and row counts with it (optional, never required).

Mapping: files are mapped private copy-on-write (``mmap.ACCESS_COPY``), so the
page cache is shared and nothing is copied until someone writes into a tensor;
a write never reaches the shard file. Arrays and tensors made from a mapping
keep it alive: they stay valid after :meth:`ShardSet.close`.

Limits checked before any byte is used: file size equals the manifest's
``bytes``, the file starts with ``ARROW1\\0\\0`` and ends with ``ARROW1``,
every buffer offset is a multiple of 8 and ``offset + length`` lies inside the
file, every buffer is at least as long as its row count needs, record batches
tile ``[0, rows)`` in order. ``sha256`` is verified on request
(``verify="sha256"``; it reads every byte).
"""

import bisect
import hashlib
import json
import mmap
import os
import re

import numpy as np

from .errors import ManifestError, MissingManifestError, MissingShardError, ShardError

FORMAT = "ferry-shards"
VERSION = 2  # the newest format version; version 1 (no segments.source) is read too
VERSIONS = (1, 2)
LOSS_TOKENS_NAME = "loss_tokens.u32"
MAGIC_HEAD = b"ARROW1\x00\x00"
MAGIC_TAIL = b"ARROW1"
MODES = ("pad", "pack")
_NAME_RE = re.compile(r"^rank-(\d{5})-of-(\d{5})\.arrow$")
# A manifest larger than this is refused before parsing (a 4096-rank manifest
# with 1024-row batches over 10^9 rows is far below it).
MAX_MANIFEST_BYTES = 1 << 30
MAX_SEQ_LEN = 1 << 24

_ROW_COLUMNS = ("input_ids", "labels", "position_ids")


def _need(cond, path, msg):
    if not cond:
        raise ManifestError(f"{path}: {msg}")


def _int(d, key, path, where, lo=0):
    v = d.get(key)
    _need(
        isinstance(v, int) and not isinstance(v, bool) and v >= lo,
        path,
        f"{where}field {key!r} = {v!r}, want an integer >= {lo}",
    )
    return v


class Manifest:
    """A validated manifest.json.

    Attributes mirror the manifest fields (``seq_len``, ``mode``, ``ranks``,
    ``rows_per_rank``, ``total_rows``, ``unique_rows``, ``drop_last``,
    ``seed``, ``batch_rows``, ``labels``, ``tokenizer``, ``stats``) plus
    ``files``: one dict per rank in rank order, and ``raw``: the parsed JSON.
    """

    def __init__(self, raw, path):
        self.path = path
        self.raw = raw
        _need(isinstance(raw, dict), path, "top level is not a JSON object")
        fmt = raw.get("format")
        _need(fmt == FORMAT, path, f"format = {fmt!r}, want {FORMAT!r}")
        ver = raw.get("version")
        _need(
            ver in VERSIONS,
            path,
            f"version = {ver!r}, this reader knows versions {VERSIONS}",
        )
        self.version = ver
        # a mixture's sources in recipe order (version 2): segment source k is sources[k]
        self.sources = raw.get("sources") or []
        _need(isinstance(self.sources, list) and (len(self.sources) > 0) == (ver == 2), path,
              f"version {ver} with {len(self.sources) if isinstance(self.sources, list) else self.sources!r} sources: "
              "version 2 lists its sources, version 1 none")
        for k, src in enumerate(self.sources):
            _need(isinstance(src, dict) and isinstance(src.get("name"), str), path,
                  f"sources[{k}] = {src!r:.80}, want an object with a name")
        self.seq_len = _int(raw, "seq_len", path, "", 1)
        _need(self.seq_len <= MAX_SEQ_LEN, path, f"seq_len {self.seq_len} above limit {MAX_SEQ_LEN}")
        self.mode = raw.get("mode")
        _need(self.mode in MODES, path, f"mode = {self.mode!r}, want one of {MODES}")
        self.ranks = _int(raw, "ranks", path, "", 1)
        self.rows_per_rank = _int(raw, "rows_per_rank", path, "", 0)
        self.total_rows = _int(raw, "total_rows", path, "", 0)
        _need(
            self.total_rows == self.ranks * self.rows_per_rank,
            path,
            f"total_rows {self.total_rows} != ranks {self.ranks} x rows_per_rank {self.rows_per_rank}",
        )
        self.unique_rows = _int(raw, "unique_rows", path, "")
        _need(
            self.unique_rows <= self.total_rows or raw.get("drop_last") is True,
            path,
            f"unique_rows {self.unique_rows} > total_rows {self.total_rows} without drop_last",
        )
        self.drop_last = raw.get("drop_last")
        _need(isinstance(self.drop_last, bool), path, f"drop_last = {self.drop_last!r}, want true or false")
        self.seed = _int(raw, "seed", path, "")
        self.batch_rows = _int(raw, "batch_rows", path, "", 1)
        self.labels = raw.get("labels")
        _need(isinstance(self.labels, str), path, f"labels = {self.labels!r}, want a string")
        self.tokenizer = raw.get("tokenizer")
        # chat data: {"template_sha256", "date"} of the chat template it was rendered with
        self.chat = raw.get("chat")
        _need(isinstance(self.tokenizer, dict), path, f"tokenizer = {self.tokenizer!r:.80}, want an object")
        self.stats = raw.get("stats") if raw.get("stats") is not None else {}
        _need(isinstance(self.stats, dict), path, f"stats = {self.stats!r:.80}, want an object")
        files = raw.get("files")
        _need(isinstance(files, list), path, "field 'files' is missing or not a list")
        _need(
            len(files) == self.ranks,
            path,
            f"{len(files)} entries in 'files', want ranks = {self.ranks}",
        )
        byrank = {}
        for i, f in enumerate(files):
            where = f"files[{i}]: "
            _need(isinstance(f, dict), path, f"{where}not an object")
            r = _int(f, "rank", path, where)
            _need(r < self.ranks, path, f"{where}rank {r} >= ranks {self.ranks}")
            _need(r not in byrank, path, f"{where}rank {r} listed twice")
            name = f.get("path")
            want = f"rank-{r:05d}-of-{self.ranks:05d}.arrow"
            _need(
                isinstance(name, str) and name == want,
                path,
                f"{where}path = {name!r}, want {want!r} (shard names are fixed; no directories)",
            )
            _int(f, "bytes", path, where, len(MAGIC_HEAD) + len(MAGIC_TAIL))
            rows = _int(f, "rows", path, where)
            _need(
                rows == self.rows_per_rank,
                path,
                f"{where}rows {rows} != rows_per_rank {self.rows_per_rank}",
            )
            sha = f.get("sha256")
            _need(
                sha is None or (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)),
                path,
                f"{where}sha256 = {sha!r}, want 64 lower-case hex digits",
            )
            self._check_batches(f, path, where)
            byrank[r] = f
        self.files = [byrank[r] for r in range(self.ranks)]
        lt = self.loss_tokens = raw.get("loss_tokens")
        if lt is not None:
            where = "loss_tokens: "
            _need(isinstance(lt, dict), path, f"{where}not an object")
            _need(lt.get("path") == LOSS_TOKENS_NAME, path,
                  f"{where}path = {lt.get('path')!r}, want {LOSS_TOKENS_NAME!r}")
            n = _int(lt, "bytes", path, where)
            _need(n == 4 * self.total_rows, path, f"{where}bytes {n}, want 4 x total_rows = {4 * self.total_rows}")
            _int(lt, "total", path, where)
            sha = lt.get("sha256")
            _need(isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha), path,
                  f"{where}sha256 = {sha!r}, want 64 lower-case hex digits")

    def _check_batches(self, f, path, where):
        batches = f.get("batches")
        _need(isinstance(batches, list), path, f"{where}'batches' missing or not a list")
        size = f["bytes"]
        L = self.seq_len
        cols = ["input_ids", "labels", "length", "segments.offsets", "segments.sample",
                "segments.start", "segments.length"]
        if self.mode == "pack":
            cols.append("position_ids")
        if self.version >= 2:
            cols.append("segments.source")
        next_row = 0
        for k, b in enumerate(batches):
            bw = f"{where}batches[{k}]: "
            _need(isinstance(b, dict), path, f"{bw}not an object")
            rs = _int(b, "row_start", path, bw)
            _need(rs == next_row, path, f"{bw}row_start {rs}, want {next_row} (batches must tile the rows in order)")
            n = _int(b, "rows", path, bw, 1)
            _need(n <= self.batch_rows, path, f"{bw}rows {n} > batch_rows {self.batch_rows}")
            next_row = rs + n
            bufs = b.get("buffers")
            _need(isinstance(bufs, dict), path, f"{bw}'buffers' missing or not an object")
            need = {
                "input_ids": n * L * 4,
                "labels": n * L * 4,
                "position_ids": n * L * 4,
                "length": n * 4,
                "segments.offsets": (n + 1) * 4,
                "segments.sample": n * 8,  # at least one segment per row
                "segments.start": n * 4,
                "segments.length": n * 4,
                "segments.source": n * 4,
            }
            for c in cols:
                buf = bufs.get(c)
                _need(isinstance(buf, dict), path, f"{bw}buffer {c!r} missing")
                off = _int(buf, "offset", path, f"{bw}buffer {c!r}: ")
                ln = _int(buf, "length", path, f"{bw}buffer {c!r}: ")
                _need(off % 8 == 0, path, f"{bw}buffer {c!r}: offset {off} is not a multiple of 8")
                _need(
                    off >= len(MAGIC_HEAD) and off + ln <= size - len(MAGIC_TAIL),
                    path,
                    f"{bw}buffer {c!r}: bytes [{off}, {off + ln}) outside the file body "
                    f"[{len(MAGIC_HEAD)}, {size - len(MAGIC_TAIL)})",
                )
                _need(
                    ln >= need[c],
                    path,
                    f"{bw}buffer {c!r}: length {ln}, want >= {need[c]} for {n} rows of seq_len {L}",
                )
        _need(
            next_row == f["rows"],
            path,
            f"{where}batches cover {next_row} rows, want {f['rows']}",
        )

    def fingerprint(self):
        """A short hex digest that identifies the data set (not the path)."""
        h = hashlib.sha256()
        key = {
            "seq_len": self.seq_len,
            "mode": self.mode,
            "ranks": self.ranks,
            "rows_per_rank": self.rows_per_rank,
            "labels": self.labels,
            "seed": self.seed,
            "tokenizer": self.tokenizer.get("sha256"),
            "files": [[f["bytes"], f.get("sha256")] for f in self.files],
        }
        h.update(json.dumps(key, sort_keys=True).encode())
        return h.hexdigest()[:32]


def read_loss_tokens(directory, manifest=None):
    """Every row's loss-token count from ``directory/loss_tokens.u32``: an
    int64 array of shape (ranks, rows_per_rank), checked against the
    manifest (size, sha256, total). A row's count is ``labels[1:] != -100``.
    None when the manifest lists no such file (older dataprep outputs)."""
    m = manifest if manifest is not None else read_manifest(directory)
    lt = m.loss_tokens
    if lt is None:
        return None
    path = os.path.join(os.fspath(directory), lt["path"])
    try:
        with open(path, "rb") as fh:
            data = fh.read(lt["bytes"] + 1)
    except FileNotFoundError:
        raise MissingShardError(f"{path}: listed in {m.path} but does not exist") from None
    if len(data) != lt["bytes"]:
        raise ShardError(f"{path}: {len(data)} bytes, {m.path} says {lt['bytes']}")
    if hashlib.sha256(data).hexdigest() != lt["sha256"]:
        raise ShardError(f"{path}: sha256 differs from {m.path}'s (corrupt or from another run)")
    counts = np.frombuffer(data, dtype="<u4").astype(np.int64).reshape(m.ranks, m.rows_per_rank)
    if int(counts.sum()) != lt["total"]:
        raise ShardError(f"{path}: entries sum to {int(counts.sum())}, {m.path} says {lt['total']}")
    return counts


def data_dir_mismatches(data_dir, tokenizer_dir=None, seq_len=None, labels=None, mode=None,
                        chat_template=None, date=None):
    """What in an existing dataprep output differs from what a job asks for:
    the tokenizer (``tokenizer_dir`` or a ``tokenizer.json`` path, compared
    by the sha256 dataprep records), ``seq_len``, the ``labels`` policy,
    the row ``mode`` ("pad" or "pack"), and for chat data the chat template
    (its text, compared by sha256) and the ``date`` strftime_now rendered;
    ``[]`` when it fits. Another shard count is fine: the loader re-splits
    the same global order."""
    m = read_manifest(data_dir)
    bad = []
    if tokenizer_dir is not None:
        path = os.fspath(tokenizer_dir)
        if not path.endswith(".json"):
            path = os.path.join(path, "tokenizer.json")
        with open(path, "rb") as fh:
            want = hashlib.sha256(fh.read()).hexdigest()
        have = (m.tokenizer or {}).get("sha256")
        if have != want:
            bad.append(f"tokenizer sha256 {str(have)[:12]}... != {want[:12]}... ({tokenizer_dir})")
    if seq_len is not None and m.seq_len != int(seq_len):
        bad.append(f"seq_len {m.seq_len} != {seq_len}")
    if labels is not None and m.labels != labels:
        bad.append(f"labels {m.labels} != {labels}")
    if mode is not None and m.mode != mode:
        bad.append(f"mode {m.mode} != {mode}")
    chat = m.chat or {}
    if chat_template is not None:
        want = hashlib.sha256(chat_template.encode("utf-8")).hexdigest()
        if chat.get("template_sha256") != want:
            bad.append(f"chat template sha256 {str(chat.get('template_sha256'))[:12]}... != {want[:12]}...")
    if date is not None and chat.get("date") != date:
        bad.append(f"date {chat.get('date')} != {date}")
    return bad


def read_manifest(directory):
    """Parse and validate ``directory/manifest.json``."""
    path = os.path.join(os.fspath(directory), "manifest.json")
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size > MAX_MANIFEST_BYTES:
                raise ManifestError(f"{path}: {st.st_size} bytes, above the limit {MAX_MANIFEST_BYTES}")
            data = fh.read()
    except FileNotFoundError:
        if not os.path.isdir(os.fspath(directory)):
            raise MissingManifestError(f"{directory}: no such directory (want a dataprep output directory)") from None
        raise MissingManifestError(
            f"{path}: not found; dataprep writes manifest.json last, so {directory} "
            "is not a complete dataprep output (still running, killed, or the wrong directory)"
        ) from None
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        pos = getattr(e, "pos", None)
        at = f" at byte {pos}" if pos is not None else ""
        raise ManifestError(f"{path}: invalid JSON{at}: {e}") from None
    return Manifest(raw, path)


class ShardFile:
    """One mapped shard. Arrays it returns alias the mapping."""

    def __init__(self, directory, entry, manifest, verify):
        self.rank = entry["rank"]
        self.path = os.path.join(directory, entry["path"])
        self.entry = entry
        self._L = manifest.seq_len
        self._mode = manifest.mode
        self._labels = manifest.labels
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise MissingShardError(
                f"{self.path}: shard of rank {self.rank} listed in {manifest.path} does not exist"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if size != entry["bytes"]:
                raise ShardError(
                    f"{self.path}: file is {size} bytes, manifest says {entry['bytes']} "
                    "(truncated, still being written, or from another run)"
                )
            self._mm = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE,
                                 prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        head = self._mm[: len(MAGIC_HEAD)]
        if head != MAGIC_HEAD:
            raise ShardError(f"{self.path}: byte 0: magic {head!r}, want {MAGIC_HEAD!r} (not an Arrow IPC file)")
        tail = self._mm[size - len(MAGIC_TAIL):]
        if tail != MAGIC_TAIL:
            raise ShardError(
                f"{self.path}: byte {size - len(MAGIC_TAIL)}: trailing magic {tail!r}, want {MAGIC_TAIL!r} "
                "(truncated or not an Arrow IPC file)"
            )
        if verify == "sha256":
            want = entry.get("sha256")
            if want is None:
                raise ShardError(f"{self.path}: verify='sha256' but the manifest has no sha256 for rank {self.rank}")
            got = hashlib.sha256(self._mm).hexdigest()
            if got != want:
                raise ShardError(f"{self.path}: sha256 {got}, manifest says {want} (file corrupted or replaced)")
        self._u8 = np.frombuffer(self._mm, dtype=np.uint8)
        self.address = self._u8.ctypes.data
        self.size = size
        self._batches = entry["batches"]
        self._starts = [b["row_start"] for b in self._batches]
        self._cols = [None] * len(self._batches)
        self._token_prefix = None
        # dataprep writes record batches of batch_rows rows (the last one may
        # be shorter): then row -> record batch is a division.
        br = manifest.batch_rows
        self._uniform = all(b["row_start"] == k * br for k, b in enumerate(self._batches))
        self._br = br

    # -- columns ---------------------------------------------------------
    def _arr(self, buf, dtype, count):
        return np.frombuffer(self._mm, dtype=dtype, count=count, offset=buf["offset"])

    def batch_columns(self, k):
        """The row columns of record batch k as numpy views, cached:
        {'input_ids': (n, L) int32, 'labels': ..., ['position_ids': ...], 'length': (n,) int32}."""
        cols = self._cols[k]
        if cols is None:
            b = self._batches[k]
            n, L, bufs = b["rows"], self._L, b["buffers"]
            cols = {
                "input_ids": self._arr(bufs["input_ids"], np.int32, n * L).reshape(n, L),
                "labels": self._arr(bufs["labels"], np.int32, n * L).reshape(n, L),
                "length": self._arr(bufs["length"], np.int32, n),
            }
            if self._mode == "pack":
                cols["position_ids"] = self._arr(bufs["position_ids"], np.int32, n * L).reshape(n, L)
            ln = cols["length"]
            if n and (int(ln.min()) < 0 or int(ln.max()) > L):
                bad = int(np.flatnonzero((ln < 0) | (ln > L))[0])
                raise ShardError(
                    f"{self.path}: byte {bufs['length']['offset'] + 4 * bad}: length of row "
                    f"{b['row_start'] + bad} is {int(ln[bad])}, want 0..{L} (seq_len)"
                )
            self._cols[k] = cols
        return cols

    def locate(self, row):
        """(record batch index, row within it) of shard row ``row``."""
        if self._uniform:
            return divmod(row, self._br)
        k = bisect.bisect_right(self._starts, row) - 1
        return k, row - self._starts[k]

    def span(self, row, rows):
        """Numpy arrays for shard rows [row, row+rows): views when the range
        lies in one record batch, else concatenated copies (second value False)."""
        k, i = self.locate(row)
        cols = self.batch_columns(k)
        if i + rows <= self._batches[k]["rows"]:
            return {c: a[i:i + rows] for c, a in cols.items()}, True
        parts = {c: [] for c in cols}
        left = rows
        while left:
            cols = self.batch_columns(k)
            take = min(left, self._batches[k]["rows"] - i)
            for c, a in cols.items():
                parts[c].append(a[i:i + take])
            left -= take
            k, i = k + 1, 0
        return {c: np.concatenate(p) for c, p in parts.items()}, False

    def view(self, row, rows):
        """(input_ids, labels, position_ids or length) numpy arrays for shard
        rows [row, row+rows), and whether they are views (else copies)."""
        if self._uniform:
            k, i = divmod(row, self._br)
        else:
            k, i = self.locate(row)
        cols = self._cols[k] or self.batch_columns(k)
        third = "position_ids" if self._mode == "pack" else "length"
        if i + rows <= len(cols["length"]):
            j = i + rows
            return cols["input_ids"][i:j], cols["labels"][i:j], cols[third][i:j], True
        c, _ = self.span(row, rows)
        return c["input_ids"], c["labels"], c[third], False

    def loss_tokens(self, row, rows):
        """Tokens that carry loss in shard rows [row, row+rows) (see
        :meth:`row_loss_tokens`)."""
        p = self.loss_token_prefix()
        return int(p[row + rows] - p[row])

    def loss_token_prefix(self):
        """Prefix sums of the per-row loss-token counts: ``p[j]`` = loss
        tokens in rows [0, j) (int64, rows + 1 entries). A row's count is
        ``labels[1:] != -100`` (HF's causal-LM loss shifts by one). Counted
        on first use for the whole shard and kept. Under the mask-pad and
        copy label policies the counts follow from the small ``length``
        and segment-offset columns (every example's first label is -100,
        and so are the pads under mask-pad), so the labels are not read;
        under mask-prompt the labels are read once."""
        p = self._token_prefix
        if p is None:
            per = np.concatenate([self._row_tokens(k) for k in range(len(self._batches))] or [np.zeros(0, np.int64)])
            p = np.zeros(len(per) + 1, dtype=np.int64)
            np.cumsum(per, out=p[1:])
            self._token_prefix = p
        return p

    def _row_tokens(self, k):
        b = self._batches[k]
        n = b["rows"]
        cols = self.batch_columns(k)
        if self._labels in ("mask-pad", "copy"):
            offs = self._arr(b["buffers"]["segments.offsets"], np.int32, n + 1).astype(np.int64)
            base = cols["length"].astype(np.int64) if self._labels == "mask-pad" else self._L
            return np.maximum(base - (offs[1:] - offs[:-1]), 0)
        return np.count_nonzero(cols["labels"][:, 1:] != -100, axis=1).astype(np.int64)

    def prefetch(self, max_bytes=1 << 30):
        """Ask the kernel to read the whole shard ahead (one madvise(WILLNEED),
        asynchronous), when it is at most ``max_bytes``. Returns whether it did."""
        if self.size > max_bytes or not hasattr(self._mm, "madvise"):
            return False
        try:
            self._mm.madvise(mmap.MADV_WILLNEED)
        except (OSError, ValueError):
            return False
        return True

    def segments(self, row, sources=False):
        """The source records in shard row ``row``: a list of (sample, start,
        length), or with ``sources`` (sample, start, length, source), where
        source is the segment's index in the manifest's ``sources`` (0 in a
        version 1 shard, which has none)."""
        k, i = self.locate(row)
        b = self._batches[k]
        n, bufs = b["rows"], b["buffers"]
        offs = self._arr(bufs["segments.offsets"], np.int32, n + 1)
        lo, hi = int(offs[i]), int(offs[i + 1])
        nseg = int(offs[n])
        cap = {
            "segments.sample": bufs["segments.sample"]["length"] // 8,
            "segments.start": bufs["segments.start"]["length"] // 4,
            "segments.length": bufs["segments.length"]["length"] // 4,
        }
        if "segments.source" in bufs:
            cap["segments.source"] = bufs["segments.source"]["length"] // 4
        if not (0 <= lo <= hi <= nseg) or any(nseg > v for v in cap.values()):
            raise ShardError(
                f"{self.path}: record batch {k} (byte {bufs['segments.offsets']['offset']}): "
                f"segment offsets [{lo}, {hi}) of row {row} (last {nseg}) out of range "
                f"of the child buffers ({cap})"
            )
        sample = self._arr(bufs["segments.sample"], np.int64, nseg)
        start = self._arr(bufs["segments.start"], np.int32, nseg)
        length = self._arr(bufs["segments.length"], np.int32, nseg)
        if not sources:
            return [(int(sample[j]), int(start[j]), int(length[j])) for j in range(lo, hi)]
        src = self._arr(bufs["segments.source"], np.int32, nseg) if "segments.source" in bufs else None
        return [(int(sample[j]), int(start[j]), int(length[j]), 0 if src is None else int(src[j]))
                for j in range(lo, hi)]

    def source_ids(self, row, rows):
        """Each token's source for shard rows [row, row+rows): an int32
        (rows, seq_len) array holding the segment's source (its index in
        the manifest's ``sources``; 0 in a version 1 shard) on the tokens
        of every segment and -1 on padding. A copy, built from the small
        segment columns."""
        L = self._L
        out = np.full((rows, L), -1, np.int32)
        r, end = row, row + rows
        while r < end:
            k, i = self.locate(r)
            b = self._batches[k]
            n, bufs = b["rows"], b["buffers"]
            take = min(n - i, end - r)
            offs = self._arr(bufs["segments.offsets"], np.int32, n + 1)
            nseg = int(offs[n])
            caps = [bufs[c]["length"] // 4 for c in ("segments.start", "segments.length", "segments.source") if c in bufs]
            if not 0 <= int(offs[i]) <= int(offs[i + take]) <= nseg or any(nseg > c for c in caps):
                raise ShardError(f"{self.path}: record batch {k} (byte {bufs['segments.offsets']['offset']}): "
                                 f"segment offsets out of range of the child buffers")
            lo, hi = int(offs[i]), int(offs[i + take])
            start = self._arr(bufs["segments.start"], np.int32, nseg)[lo:hi].astype(np.int64)
            length = self._arr(bufs["segments.length"], np.int32, nseg)[lo:hi].astype(np.int64)
            if "segments.source" in bufs:
                src = self._arr(bufs["segments.source"], np.int32, nseg)[lo:hi]
            else:
                src = np.zeros(hi - lo, np.int32)
            seg_row = np.repeat(np.arange(take) + (r - row), np.diff(offs[i:i + take + 1]))
            if length.size and (length.min() < 1 or (start + length).max() > L or start.min() < 0):
                raise ShardError(f"{self.path}: record batch {k}: a segment outside its row of {L} tokens")
            excl = np.cumsum(length) - length  # each segment's first token in the flat run of all of them
            pos = np.arange(int(length.sum())) - np.repeat(excl - start, length)
            out[np.repeat(seg_row, length), pos] = np.repeat(src, length)
            r += take
        return out

    def row_address(self, column, row):
        """Absolute address of shard row ``row`` of ``column`` in this process."""
        k, i = self.locate(row)
        return self.address + self._batches[k]["buffers"][column]["offset"] + i * self._L * 4

    def close(self):
        """Unmap unless arrays made from the mapping are still alive (then
        the mapping lives on until they are gone)."""
        self._cols = [None] * len(self._batches)
        self._token_prefix = None
        self._u8 = None
        try:
            self._mm.close()
        except BufferError:
            pass


class ShardSet:
    """All shards of one dataprep output directory, mapped on first use.

    ``verify``: ``"size"`` (default: file size and magic, checked when a shard
    is first mapped) or ``"sha256"`` (also the whole-file checksum; reads the
    file once). Opening a ShardSet reads only manifest.json; ``open_all()``
    maps and checks every shard up front.

    Safe to share between threads for reading once shards are mapped; map
    them with ``open_all()`` first if several threads start at once.
    """

    def __init__(self, directory, verify="size"):
        if verify not in ("size", "sha256"):
            raise ValueError(f"verify = {verify!r}, want 'size' or 'sha256'")
        self.directory = os.fspath(directory)
        self.verify = verify
        self.manifest = read_manifest(self.directory)
        self._files = [None] * self.manifest.ranks

    def __getstate__(self):
        # Mappings do not cross processes by pickling: a DataLoader worker
        # started with "spawn" maps the files again on first use.
        st = self.__dict__.copy()
        st["_files"] = [None] * self.manifest.ranks
        return st

    def shard(self, rank):
        f = self._files[rank]
        if f is None:
            f = ShardFile(self.directory, self.manifest.files[rank], self.manifest, self.verify)
            self._files[rank] = f
        return f

    def open_all(self):
        for r in range(self.manifest.ranks):
            self.shard(r)
        return self

    def position(self, p):
        """(shard, row) of global position p."""
        R = self.manifest.ranks
        if not 0 <= p < self.manifest.total_rows:
            raise IndexError(f"position {p} outside [0, {self.manifest.total_rows})")
        return p % R, p // R

    def check_arrow(self, rank):
        """Cross-check shard ``rank`` with pyarrow (only when pyarrow is
        importable; returns False without it): schema columns and row count."""
        try:
            import pyarrow as pa  # noqa: F401
            import pyarrow.ipc as ipc
        except ImportError:
            return False
        sf = self.shard(rank)
        reader = ipc.open_file(pa.py_buffer(sf._mm))
        names = set(reader.schema.names)
        want = {"input_ids", "labels", "length", "segments"}
        if self.manifest.mode == "pack":
            want.add("position_ids")
        if not want <= names:
            raise ShardError(f"{sf.path}: Arrow schema has columns {sorted(names)}, want {sorted(want)}")
        rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
        if rows != sf.entry["rows"]:
            raise ShardError(f"{sf.path}: Arrow file holds {rows} rows, manifest says {sf.entry['rows']}")
        return True

    def close(self):
        for f in self._files:
            if f is not None:
                f.close()
        self._files = [None] * self.manifest.ranks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
