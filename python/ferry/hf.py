"""A dataprep shard as a Hugging Face ``datasets.Dataset``.

``datasets.Dataset.from_file(path)`` cannot open a ferry shard: datasets
reads its files as the Arrow IPC *stream* format (``pyarrow.ipc.open_stream``),
and a shard is the IPC *file* format (docs/shard-format.md), which starts with
the 8-byte magic ``ARROW1\\0\\0``; the stream reader takes the first four
bytes, ``ARRO``, for a message length and fails with
``ArrowInvalid: Expected to read 1330795073 metadata bytes ...``.
``load_dataset("arrow", data_files=path)`` does work (its builder falls back
to ``pyarrow.ipc.open_file``) but copies every row into the HF cache first.

:func:`to_hf_dataset` opens the shard with pyarrow's IPC file reader instead.
By default it copies nothing: the Dataset's table is the shard's record
batches as pyarrow maps them, held by datasets as an ``InMemoryTable``
(datasets' name for a table it does not re-read from a path) with a
fingerprint taken from the manifest's SHA-256, so datasets never hashes the
rows. Pickling such a Dataset (``map(num_proc=...)``, DataLoader workers
started with "spawn") copies the rows; forked workers share the mapping.
With ``stream_dir`` it writes the shard once as an Arrow IPC stream file and
returns ``Dataset.from_file`` of that: memory-mapped and pickled by path like
any datasets cache file, at the cost of one copy on disk.

Needs ``pyarrow`` and ``datasets`` (imported on first call; ferry itself
does not depend on them).
"""

import os

from .errors import ShardError
from .shards import read_manifest


def _imports():
    try:
        import datasets
        import pyarrow as pa
        import pyarrow.ipc  # noqa: F401
    except ImportError as e:
        raise ImportError(f"ferry.to_hf_dataset needs pyarrow and datasets ({e}); pip install datasets") from e
    return pa, datasets


def to_hf_dataset(data_dir, rank, stream_dir=None):
    """Shard ``rank`` of the dataprep output ``data_dir`` as a
    ``datasets.Dataset``: one example per shard row, in shard order, with the
    shard's columns (``input_ids``, ``labels``, ``position_ids`` in pack
    mode: fixed-length int32 lists; ``length``: int32; ``segments``: a list
    of ``{sample, start, length}``).

    Without ``stream_dir`` nothing is copied (see the module documentation).
    With it, the shard is written to ``stream_dir`` once as an Arrow IPC
    stream file (kept and reused while its size and the manifest's SHA-256
    match) and the Dataset is memory-mapped from there.
    """
    pa, datasets = _imports()
    m = read_manifest(data_dir)
    if not isinstance(rank, int) or not 0 <= rank < m.ranks:
        raise ValueError(f"rank {rank!r} outside [0, {m.ranks}) for {m.path}")
    entry = m.files[rank]
    path = os.path.join(os.fspath(data_dir), entry["path"])
    if not os.path.exists(path):
        raise ShardError(f"{path}: shard of rank {rank} listed in {m.path} does not exist")
    size = os.path.getsize(path)
    if size != entry["bytes"]:
        raise ShardError(f"{path}: file is {size} bytes, manifest says {entry['bytes']}")
    tag = (entry.get("sha256") or f"{size}")[:16]
    with pa.memory_map(path, "r") as mm:
        reader = pa.ipc.open_file(mm)
        table = reader.read_all()  # views of the mapping; it stays mapped while they live
    if table.num_rows != entry["rows"]:
        raise ShardError(f"{path}: pyarrow reads {table.num_rows} rows, manifest says {entry['rows']}")
    if stream_dir is None:
        from datasets.table import InMemoryTable

        return datasets.Dataset(InMemoryTable(table), fingerprint=f"ferry-{tag}-r{rank}")
    os.makedirs(stream_dir, exist_ok=True)
    out = os.path.join(os.fspath(stream_dir), entry["path"])
    schema = table.schema.with_metadata({**(table.schema.metadata or {}), b"ferry.stream_of": tag.encode()})
    if not _stream_is(pa, out, tag):
        tmp = f"{out}.tmp-{os.getpid()}"
        with pa.OSFile(tmp, "wb") as f, pa.ipc.new_stream(f, schema) as w:
            for batch in table.to_batches():
                w.write_batch(batch)
        os.replace(tmp, out)
    return datasets.Dataset.from_file(out)


def _stream_is(pa, path, tag):
    """Whether path is a stream file written from the shard with this tag."""
    try:
        with pa.memory_map(path, "r") as mm:
            md = pa.ipc.open_stream(mm).schema.metadata or {}
    except (OSError, pa.ArrowInvalid):
        return False
    return md.get(b"ferry.stream_of") == tag.encode()
