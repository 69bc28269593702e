#!/usr/bin/env python3
"""arrowcheck: read ferry shard directories with pyarrow and compare.

Usage::

    python check_shards.py [--expect EXPECT.json] DIR [DIR ...]
    python check_shards.py --serve      (JSON lines on stdin/stdout; see serve)

For every directory the script reads manifest.json and opens every shard it
lists with pyarrow's memory-mapped IPC *file* reader
(``pyarrow.ipc.open_file(pyarrow.memory_map(path))``), then compares what
pyarrow decodes with three expectations that do not come from pyarrow:

1. the manifest: file size and SHA-256, the schema metadata (``ferry.*``
   keys against the manifest's fields), the number of record batches and the
   rows of each;
2. a plain-file reader: every values buffer read with ``os.pread`` at the
   absolute offset the manifest gives (the bytes ferry's Go reader found when
   dataprep checked the file, and what ``ferry.ShardSet`` maps). pyarrow's
   buffer must start at that very offset of the mapping, and its values
   must equal the plain read element for element (a mismatch names the row
   and position);
3. the format's rules (docs/shard-format.md): the exact Arrow schema, no
   nulls, no validity bitmaps, segments contiguous from 0 and summing to
   ``length``, pad positions holding ``pad_id`` with the labels policy's
   label, labels equal to input_ids or -100, pack mode's position_ids
   restarting at every segment and its first label -100, one segment per
   row in pad mode;

and, with ``--expect``, 4. what ferry's Go reader (shard.Open) read: per
record batch and column, the SHA-256 of the little-endian values, the batch
rows and the schema metadata. The Go test helper
(internal/testutil/arrowcheck) writes that file.

Exit status: 0 when everything matches (one summary line), 1 when something
differs (one line per problem, then the summary), 2 for bad usage, 3 when
pyarrow or numpy cannot be imported. Python tests import this file and call
:func:`check_dirs` directly.
"""

import hashlib
import json
import os
import sys
import traceback

try:
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc
except ImportError as e:  # exit 3: the Go helper tells a missing module from a failed check
    if __name__ == "__main__":
        print(f"arrowcheck: {sys.executable} cannot import {e.name}: {e}", file=sys.stderr)
        sys.exit(3)
    raise

IGNORE = -100
MAX_PROBLEMS = 50  # per shard; the rest are counted

SEGMENT_COLUMNS = ("segments.offsets", "segments.sample", "segments.start", "segments.length")


def token_type(seq_len):
    return pa.list_(pa.field("item", pa.int32(), nullable=False), seq_len)


SEGMENT_FIELDS = [
    pa.field("sample", pa.int64(), nullable=False),
    pa.field("start", pa.int32(), nullable=False),
    pa.field("length", pa.int32(), nullable=False),
    pa.field("source", pa.int32(), nullable=False),  # format version 2 (a mixture) only
]


def segment_type(sources):
    return pa.list_(pa.field("item", pa.struct(SEGMENT_FIELDS if sources else SEGMENT_FIELDS[:3]), nullable=False))


def want_schema(mode, seq_len, sources=False):
    """The Arrow schema docs/shard-format.md specifies (without metadata);
    sources: format version 2, whose segments carry source."""
    fields = [pa.field("input_ids", token_type(seq_len), nullable=False),
              pa.field("labels", token_type(seq_len), nullable=False)]
    if mode == "pack":
        fields.append(pa.field("position_ids", token_type(seq_len), nullable=False))
    fields += [pa.field("length", pa.int32(), nullable=False),
               pa.field("segments", segment_type(sources), nullable=False)]
    return pa.schema(fields)


class Report:
    """What check_dirs found: ``problems`` (strings) and counters."""

    def __init__(self):
        self.problems = []
        self.dirs = self.shards = self.batches = self.rows = self.values = 0

    @property
    def ok(self):
        return not self.problems

    def summary(self):
        state = "ok" if self.ok else f"{len(self.problems)} problems"
        return (f"arrowcheck: {state}: pyarrow {pa.__version__} read {self.dirs} directories, "
                f"{self.shards} shards, {self.batches} record batches, {self.rows} rows, "
                f"{self.values} values compared")

    def text(self):
        return "\n".join(self.problems + [self.summary()])


class _Shard:
    """Checks one shard file; problems go to report, prefixed with the path."""

    def __init__(self, report, directory, manifest, entry, expect):
        self.report = report
        self.m = manifest
        self.entry = entry
        self.path = os.path.join(directory, entry["path"])
        self.expect = expect
        self.L = manifest["seq_len"]
        self.mode = manifest["mode"]
        self.sources = manifest["version"] >= 2
        self.n_problems = 0

    def bad(self, msg):
        self.n_problems += 1
        if self.n_problems <= MAX_PROBLEMS:
            self.report.problems.append(f"{self.path}: {msg}")
        elif self.n_problems == MAX_PROBLEMS + 1:
            self.report.problems.append(f"{self.path}: more problems not shown")

    def run(self):
        try:
            st = os.stat(self.path)
        except OSError as e:
            self.bad(f"cannot stat: {e}")
            return
        if st.st_size != self.entry["bytes"]:
            self.bad(f"file is {st.st_size} bytes, manifest says {self.entry['bytes']}")
            return
        with open(self.path, "rb") as fh:
            self.fd = fh.fileno()
            sha = hashlib.sha256()
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha.update(chunk)
            if self.entry.get("sha256") and sha.hexdigest() != self.entry["sha256"]:
                self.bad(f"sha256 {sha.hexdigest()}, manifest says {self.entry['sha256']}")
            try:
                self.read()
            except (pa.ArrowException, ValueError, OSError) as e:
                self.bad(f"pyarrow cannot read it: {type(e).__name__}: {e}")

    def pread(self, ref, dtype, count):
        nbytes = count * np.dtype(dtype).itemsize
        raw = os.pread(self.fd, nbytes, ref["offset"])
        if len(raw) != nbytes:
            return None
        return np.frombuffer(raw, dtype=dtype)

    def read(self):
        with pa.memory_map(self.path, "r") as mm:
            self.read_mapped(mm)

    def read_mapped(self, mm):
        base = mm.read_buffer(mm.size()).address  # the mapping pyarrow reads from
        reader = pa.ipc.open_file(mm)
        self.check_schema(reader.schema)
        mb = self.entry["batches"]
        if reader.num_record_batches != len(mb):
            self.bad(f"pyarrow sees {reader.num_record_batches} record batches, manifest lists {len(mb)}")
        exp = self.expect["batches"] if self.expect else None
        if exp is not None and len(exp) != reader.num_record_batches:
            self.bad(f"pyarrow sees {reader.num_record_batches} record batches, ferry's reader {len(exp)}")
        rows = 0
        for k in range(reader.num_record_batches):
            batch = reader.get_batch(k)
            self.report.batches += 1
            if k < len(mb):
                self.check_batch(k, batch, mb[k], base, exp[k] if exp is not None and k < len(exp) else None)
            rows += batch.num_rows
        self.report.rows += rows
        if rows != self.entry["rows"]:
            self.bad(f"pyarrow reads {rows} rows, manifest says {self.entry['rows']}")
        self.report.shards += 1

    def check_schema(self, schema):
        want = want_schema(self.mode, self.L, self.sources)
        if not schema.remove_metadata().equals(want):
            self.bad(f"schema\n  {schema.remove_metadata()}\nwant\n  {want}".replace("\n", "\n  "))
        md = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        m = self.m
        want_md = {
            "ferry.format": "ferry-shards", "ferry.version": str(m["version"]), "ferry.rank": str(self.entry["rank"]),
            "ferry.ranks": str(m["ranks"]), "ferry.seq_len": str(self.L), "ferry.mode": self.mode,
            "ferry.labels": m["labels"], "ferry.tokenizer_sha256": m["tokenizer"].get("sha256", ""),
        }
        if md != want_md:
            self.bad(f"schema metadata {md}, manifest gives {want_md}")
        if self.expect and md != self.expect["meta"]:
            self.bad(f"schema metadata {md}, ferry's reader {self.expect['meta']}")

    def check_batch(self, k, batch, mb, base, exp):
        n, L = batch.num_rows, self.L
        where = f"batch {k} (rows {mb['row_start']}..{mb['row_start'] + mb['rows'] - 1})"
        if n != mb["rows"]:
            self.bad(f"{where}: pyarrow reads {n} rows, manifest says {mb['rows']}")
            return
        if exp is not None and n != exp["rows"]:
            self.bad(f"{where}: pyarrow reads {n} rows, ferry's reader {exp['rows']}")
        for c in batch.schema.names:
            arr = batch.column(c)
            if arr.null_count or arr.offset or arr.buffers()[0] is not None:
                self.bad(f"{where} column {c}: {arr.null_count} nulls, offset {arr.offset}, "
                         f"validity bitmap {arr.buffers()[0] is not None}; want none")
        cols = {}  # name -> (pyarrow buffer, numpy values, dtype, shape)
        tok = ["input_ids", "labels"] + (["position_ids"] if self.mode == "pack" else [])
        for c in tok:
            values = batch.column(c).values
            cols[c] = (values.buffers()[1], values, np.int32, (n, L))
        cols["length"] = (batch.column("length").buffers()[1], batch.column("length"), np.int32, (n,))
        seg = batch.column("segments")
        cols["segments.offsets"] = (seg.buffers()[1], seg.offsets, np.int32, (n + 1,))
        struct = seg.values
        if struct.null_count or struct.buffers()[0] is not None:
            self.bad(f"{where} column segments: struct child has {struct.null_count} nulls or a validity bitmap")
        fields = (("sample", np.int64), ("start", np.int32), ("length", np.int32))
        if self.sources:
            fields += (("source", np.int32),)
        for f, dt in fields:
            child = struct.field(f)
            if child.null_count or child.buffers()[0] is not None:
                self.bad(f"{where} column segments.{f}: {child.null_count} nulls or a validity bitmap")
            cols["segments." + f] = (child.buffers()[1], child, dt, (len(child),))
        got = {}
        for c, (buf, arr, dt, shape) in cols.items():
            # pyarrow's own values buffer, viewed in place (Array.to_numpy
            # would import pandas, a second of start-up).
            count = int(np.prod(shape))
            if len(arr) != count or arr.offset or buf is None or buf.size < count * np.dtype(dt).itemsize:
                self.bad(f"{where} column {c}: pyarrow gives {len(arr)} values at offset {arr.offset} in a "
                         f"{None if buf is None else buf.size}-byte buffer, want {count} {np.dtype(dt)} values")
                return
            a = np.frombuffer(buf, dtype=dt, count=count).reshape(shape)
            got[c] = a
            self.report.values += a.size
            ref = mb["buffers"].get(c)
            if ref is None:
                self.bad(f"{where}: manifest has no buffer {c!r}")
                continue
            if ref["length"] and buf.address - base != ref["offset"]:
                self.bad(f"{where} column {c}: pyarrow's values start at byte {buf.address - base}, "
                         f"the manifest says {ref['offset']}")
            plain = self.pread(ref, dt, count)
            if plain is None:
                self.bad(f"{where} column {c}: the file ends before {count} values at byte {ref['offset']}")
            elif not np.array_equal(plain.reshape(shape), a):
                self.bad(f"{where} column {c}: {first_diff(a, plain.reshape(shape), mb['row_start'], ref, dt)}")
            if exp is not None:
                h = hashlib.sha256(np.ascontiguousarray(a, dtype=np.dtype(dt).newbyteorder("<"))).hexdigest()
                want = exp["sha256"].get(c)
                if h != want:
                    self.bad(f"{where} column {c}: pyarrow's values hash to sha256 {h[:16]}…, "
                             f"ferry's reader read {str(want)[:16]}…")
        self.check_rules(where, mb["row_start"], got)

    def check_rules(self, where, row0, c):
        """The format's invariants, vectorised over the batch."""
        ids, labs, ln = c["input_ids"], c["labels"], c["length"]
        offs, smp, sst, sln = (c[k] for k in SEGMENT_COLUMNS)
        n, L = ln.shape[0], self.L

        def rows_where(mask_rows, what):
            r = np.flatnonzero(mask_rows)
            if r.size:
                self.bad(f"{where}: {what} in {r.size} rows, first row {row0 + int(r[0])}")
            return r.size

        if rows_where((ln < 1) | (ln > L), f"length: outside 1..{L}"):
            return
        cnt = np.diff(offs)
        if offs[0] != 0 or (cnt < 1).any() or offs[-1] != smp.size:
            self.bad(f"{where}: segment offsets {offs[:4]}… (last {offs[-1]}) do not give every row "
                     f"at least one of the {smp.size} segments")
            return
        if self.mode == "pad":
            rows_where(cnt != 1, "segments: more than one in pad mode")
        if (sln < 1).any() or (smp < 0).any():
            self.bad(f"{where}: a segment with length < 1 or a negative sample")
            return
        if "segments.source" in c and ((c["segments.source"] < 0) | (c["segments.source"] >= len(self.m.get("sources", [])))).any():
            self.bad(f"{where}: a segment source outside the manifest's {len(self.m.get('sources', []))} sources")
        row_of = np.repeat(np.arange(n), cnt)
        excl = np.cumsum(sln) - sln  # start of each segment counted over the whole batch
        if rows_where(np.bincount(row_of[sst != excl - excl[offs[:-1]][row_of]], minlength=n) > 0,
                      "segments: not contiguous from position 0"):
            return
        if rows_where(np.add.reduceat(sln, offs[:-1]) != ln, "segments: lengths do not sum to length"):
            return
        pos = np.arange(L)[None, :]
        pad = pos >= ln[:, None]
        pad_id = self.m["tokenizer"].get("pad_id")
        if isinstance(pad_id, int):
            rows_where((pad & (ids != pad_id)).any(axis=1), f"input_ids: padding that is not pad_id {pad_id}")
            want_pad_label = pad_id if self.m["labels"] == "copy" else IGNORE
            rows_where((pad & (labs != want_pad_label)).any(axis=1),
                       f"labels: padding labelled other than {want_pad_label}")
        rows_where(((labs != ids) & (labs != IGNORE) & ~pad).any(axis=1), "labels: neither input_ids nor -100")
        if self.mode == "pack":
            rows_where(labs[row_of, sst] != IGNORE, "labels: first label of an example not -100")
            start = np.full((n, L), -1, np.int64)
            start[row_of, sst] = sst
            start = np.maximum.accumulate(start, axis=1)
            rows_where((c["position_ids"] != pos - start).any(axis=1),
                       "position_ids: do not restart at every segment (or continue through the padding)")
        elif self.m["labels"] == "copy":
            rows_where((labs != ids).any(axis=1), "labels: differ from input_ids under --labels copy")


def first_diff(a, b, row0, ref, dt):
    i = int(np.flatnonzero(a.ravel() != b.ravel())[0])
    byte = ref["offset"] + i * np.dtype(dt).itemsize
    if a.ndim == 2:
        r, j = divmod(i, a.shape[1])
        at = f"row {row0 + r} position {j}"
    else:
        at = f"element {i}"
    return (f"{at}: pyarrow reads {a.ravel()[i]}, the file holds {b.ravel()[i]} at byte {byte} "
            f"(manifest offset {ref['offset']})")


def check_dirs(dirs, expect=None):
    """Check every shard of every directory in dirs; expect maps a shard's
    absolute path to what ferry's Go reader read (see --expect). Returns a
    Report."""
    rep = Report()
    expect = expect or {}
    seen = set()
    for d in dirs:
        d = os.path.abspath(d)
        try:
            with open(os.path.join(d, "manifest.json"), "rb") as fh:
                m = json.load(fh)
        except (OSError, ValueError) as e:
            rep.problems.append(f"{d}: manifest.json: {e}")
            continue
        rep.dirs += 1
        files = m.get("files") or []
        if len(files) != m.get("ranks"):
            rep.problems.append(f"{d}: manifest lists {len(files)} files for {m.get('ranks')} ranks")
        for entry in files:
            path = os.path.join(d, entry["path"])
            seen.add(path)
            _Shard(rep, d, m, entry, expect.get(path)).run()
    for p in sorted(set(expect) - seen):
        rep.problems.append(f"{p}: ferry's reader read it, but no manifest checked here lists it")
    return rep


def serve():
    """Answer check requests, one JSON line each on stdin
    ({"dirs": [...], "expect": [shard, ...]}), with one JSON line each on
    stdout ({"ok": bool, "report": "..."}), until stdin closes. The Go helper
    keeps one such process per test binary, so pyarrow is imported once."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may reach the reply channel
    out.write(f"arrowcheck: ready (pyarrow {pa.__version__})\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            rep = check_dirs(req["dirs"], {s["path"]: s for s in req.get("expect") or []})
            reply = {"ok": rep.ok, "report": rep.text()}
        except Exception:  # a checker bug fails the check; the process goes on
            reply = {"ok": False, "report": "arrowcheck: internal error:\n" + traceback.format_exc()}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


def main(argv):
    if argv == ["--serve"]:
        return serve()
    expect = None
    dirs = []
    it = iter(argv)
    for a in it:
        if a == "--expect":
            path = next(it, None)
            if path is None:
                print("arrowcheck: --expect needs a file", file=sys.stderr)
                return 2
            with open(path) as fh:
                expect = {s["path"]: s for s in json.load(fh)["shards"]}
        elif a.startswith("-"):
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
        else:
            dirs.append(a)
    if not dirs:
        print("usage: check_shards.py [--expect EXPECT.json] DIR [DIR ...]", file=sys.stderr)
        return 2
    rep = check_dirs(dirs, expect)
    print(rep.text())
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
