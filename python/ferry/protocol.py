"""ferry-serve's wire protocol and shared-memory ring layout, client side.

The contract is serve/doc.go (Go: package serve); serve/testdata/
protocol.golden.json pins it, and tests/test_serve.py checks this module
against that file. Only codecs and layout live here: no sockets, no
loader (see :mod:`ferry.serve_client`).
"""

import json
import struct

import numpy as np

from .errors import ProtocolError, ServeError

VERSION = 1
MSG_MAGIC = 0x53595246  # "FRYS"
MSG_HEADER = struct.Struct("<IHHII")
MAX_MSG_SIZE = 128 << 10
MSG_HELLO, MSG_WELCOME, MSG_PLAN, MSG_ERROR = 1, 2, 3, 4
MSG_FILE, MSG_FILE_DATA = 5, 6  # model files (serve/weights.go; ferry.weights_client)
CODE_BAD_REQUEST, CODE_NOT_SERVED, CODE_LIMIT, CODE_SHUTDOWN, CODE_IO = 1, 2, 3, 4, 5

_HELLO = struct.Struct("<IIIiiI")
_WELCOME = struct.Struct("<IIQII")
_PLAN = struct.Struct("<II")
_ERROR = struct.Struct("<II")
RUN_SIZE = 16
RUN_CONTINUES = 1
MAX_RUNS_PER_MSG = (MAX_MSG_SIZE - MSG_HEADER.size - _PLAN.size) // RUN_SIZE
MAX_ROWS = 1 << 16
MAX_SLOTS = 1024
MAX_PLAN_AHEAD = 64

SHM_MAGIC = b"FERRYSHM"
SHM_HEADER_SIZE = 4096
SHM_COLUMN_TABLE_OFFSET = 64
SHM_COLUMN_ENTRY_SIZE = 16
SLOT_HEADER_SIZE = 64
SLOT_ALIGN = 4096
COLUMN_ALIGN = 64
_SHM_FIXED = struct.Struct("<8sIIIIIIQQQQ")  # 64 bytes
_COLUMN = struct.Struct("<QB3xI")
_SLOT_HEADER = struct.Struct("<QII")
SLOT_FILLED = 1
MODE_PAD, MODE_PACK = 0, 1
DTYPE_INT32, DTYPE_INT64 = 1, 2
_DTYPES = {DTYPE_INT32: np.dtype("<i4"), DTYPE_INT64: np.dtype("<i8")}
COLUMNS = ("input_ids", "labels", "attention_mask", "position_ids", "length", "sample", "source_ids", "")
COL_SOURCE_IDS = 6
HELLO_SOURCE_IDS = 1  # HELLO flag: add the source_ids column

# Seals the daemon puts on the ring (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL).
_F_SEAL_SEAL, _F_SEAL_SHRINK, _F_SEAL_GROW = 0x1, 0x2, 0x4
_F_GET_SEALS = 1034  # fcntl.F_GET_SEALS on Linux (Python >= 3.8 exposes it)
REQUIRED_SEALS = _F_SEAL_SEAL | _F_SEAL_SHRINK | _F_SEAL_GROW


# -- messages ------------------------------------------------------------------
def _msg(typ, payload):
    return MSG_HEADER.pack(MSG_MAGIC, typ, 0, len(payload), 0) + payload


def encode_file_request(path, file, offset, length):
    """MSG_FILE: bytes [offset, offset+length) of a model file (length 0:
    the whole file; offset = length = 0 with only the size wanted is a
    stat). The payload is JSON with the keys of serve.FileRequest."""
    req = {"path": path, "file": file, "offset": offset, "length": length}
    return _msg(MSG_FILE, json.dumps(req, separators=(",", ":")).encode())


def parse_file_data(payload):
    """MSG_FILE_DATA's payload (serve.FileData): a dict with ``size``,
    ``file_size`` and ``missing``, absent keys as their zero values."""
    try:
        d = json.loads(bytes(payload))
    except ValueError as e:
        raise ProtocolError(f"FILEDATA payload is not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ProtocolError(f"FILEDATA payload is {type(d).__name__}, want an object")
    return {"size": int(d.get("size", 0)), "file_size": int(d.get("file_size", 0)),
            "missing": bool(d.get("missing", False))}


def encode_hello(slots, max_rows, rank=-1, worker=-1, version=VERSION, flags=0):
    """MSG_HELLO; flags: HELLO_SOURCE_IDS for the source_ids column."""
    return _msg(MSG_HELLO, _HELLO.pack(version, slots, max_rows, rank, worker, flags))


def encode_welcome(shm_size, info, version=VERSION):
    return _msg(MSG_WELCOME, _WELCOME.pack(version, 0, shm_size, len(info), 0) + info)


def encode_plan(runs):
    """runs: (file, row, rows, flags) quadruples, a sequence or an (n, 4)
    uint32 array. A batch is one run, or several when all but the last have
    flags RUN_CONTINUES."""
    runs = np.ascontiguousarray(runs, dtype="<u4").reshape(-1, 4)
    return _msg(MSG_PLAN, _PLAN.pack(len(runs), 0) + runs.tobytes())


def encode_error(code, text):
    return _msg(MSG_ERROR, _ERROR.pack(code, 0) + text.encode())


def parse_msg(b):
    """(type, payload) of one received datagram; ProtocolError if malformed."""
    if len(b) < MSG_HEADER.size:
        raise ProtocolError(f"ferry-serve message of {len(b)} bytes, want at least {MSG_HEADER.size}")
    magic, typ, flags, length, reserved = MSG_HEADER.unpack_from(b)
    if magic != MSG_MAGIC:
        raise ProtocolError(f"ferry-serve message magic {magic:#010x} at byte 0, want {MSG_MAGIC:#010x}")
    if flags or reserved:
        raise ProtocolError(f"ferry-serve message type {typ}: reserved header bytes not zero")
    if length != len(b) - MSG_HEADER.size:
        raise ProtocolError(f"ferry-serve message type {typ}: header says {length} payload bytes, got {len(b) - 16}")
    return typ, bytes(b[MSG_HEADER.size:])


def parse_welcome(p):
    if len(p) < _WELCOME.size:
        raise ProtocolError(f"WELCOME payload of {len(p)} bytes, want at least {_WELCOME.size}")
    version, _, shm_size, info_len, _ = _WELCOME.unpack_from(p)
    if version != VERSION:
        raise ProtocolError(f"ferry-serve speaks protocol version {version}, this client speaks {VERSION}")
    if info_len != len(p) - _WELCOME.size:
        raise ProtocolError(f"WELCOME info length {info_len} at byte 16, payload holds {len(p) - _WELCOME.size}")
    return shm_size, p[_WELCOME.size:]


def parse_error(p):
    if len(p) < _ERROR.size:
        raise ProtocolError(f"ERROR payload of {len(p)} bytes, want at least 8")
    return _ERROR.unpack_from(p)[0], p[_ERROR.size:].decode("utf-8", "replace")


# -- shared-memory layout -----------------------------------------------------------
def _align(n, a):
    return (n + a - 1) // a * a


class Layout:
    """The ring layout (serve.Layout): slot size and per-column placement,
    with the optional columns that the HELLO flags ask for."""

    def __init__(self, slots, max_rows, seq_len, mode, flags=0):
        if not (1 <= slots <= MAX_SLOTS and 1 <= max_rows <= MAX_ROWS and 1 <= seq_len <= 1 << 20 and mode in (0, 1)
                and not flags & ~HELLO_SOURCE_IDS):
            raise ServeError(f"ring slots={slots} max_rows={max_rows} seq_len={seq_len} mode={mode} flags={flags:#x} "
                             "out of limits", CODE_LIMIT)
        self.slots, self.max_rows, self.seq_len, self.mode = slots, max_rows, seq_len, mode
        self.columns = [(0, 0, 0)] * 8  # (offset, dtype, width)
        off = SLOT_HEADER_SIZE

        def add(i, dt, width):
            nonlocal off
            off = _align(off, COLUMN_ALIGN)
            self.columns[i] = (off, dt, width)
            off += max_rows * width * _DTYPES[dt].itemsize

        add(0, DTYPE_INT32, seq_len)
        add(1, DTYPE_INT32, seq_len)
        if mode == MODE_PAD:
            add(2, DTYPE_INT32, seq_len)
        else:
            add(3, DTYPE_INT32, seq_len)
        add(4, DTYPE_INT32, 1)
        add(5, DTYPE_INT64, 1)
        if flags & HELLO_SOURCE_IDS:
            add(COL_SOURCE_IDS, DTYPE_INT32, seq_len)
        self.slot_size = _align(off, SLOT_ALIGN)
        self.total_size = SHM_HEADER_SIZE + slots * self.slot_size

    def slot_offset(self, i):
        return SHM_HEADER_SIZE + i * self.slot_size

    def header(self):
        """The 4096-byte header page."""
        b = bytearray(SHM_HEADER_SIZE)
        _SHM_FIXED.pack_into(b, 0, SHM_MAGIC, VERSION, SHM_HEADER_SIZE, self.slots, self.max_rows, self.seq_len,
                             self.mode, self.slot_size, SHM_HEADER_SIZE, self.total_size, 0)
        for i, (off, dt, w) in enumerate(self.columns):
            _COLUMN.pack_into(b, SHM_COLUMN_TABLE_OFFSET + i * SHM_COLUMN_ENTRY_SIZE, off, dt, w)
        return bytes(b)


def parse_header(b, size):
    """Validate a ring header page against the memfd size; return its Layout.
    Accepts exactly what Layout(...) produces for the same parameters."""
    b = bytes(b[:SHM_HEADER_SIZE])
    if len(b) < SHM_HEADER_SIZE:
        raise ProtocolError(f"ring header of {len(b)} bytes, want {SHM_HEADER_SIZE}")
    magic, ver, hs, slots, max_rows, seq_len, mode, _, _, _, _ = _SHM_FIXED.unpack_from(b)
    if magic != SHM_MAGIC:
        raise ProtocolError(f"ring magic {magic!r} at byte 0, want {SHM_MAGIC!r}")
    if ver != VERSION or hs != SHM_HEADER_SIZE:
        raise ProtocolError(f"ring version {ver} header_size {hs}, want {VERSION} and {SHM_HEADER_SIZE}")
    # the optional columns are those with an entry
    src_offset = _COLUMN.unpack_from(b, SHM_COLUMN_TABLE_OFFSET + COL_SOURCE_IDS * SHM_COLUMN_ENTRY_SIZE)[0]
    flags = HELLO_SOURCE_IDS if src_offset else 0
    try:
        want = Layout(slots, max_rows, seq_len, mode, flags)
    except ServeError as e:
        raise ProtocolError(f"ring header: {e}") from None
    if b != want.header() or want.total_size > size:
        raise ProtocolError(
            f"ring header does not match the layout of {slots} slots x {max_rows} rows x seq_len {seq_len} "
            f"(mode {mode}, flags {flags:#x}) within a {size}-byte memfd"
        )
    return want
