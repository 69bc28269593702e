"""Load a Hugging Face base model (safetensors) into a model that may already
be sharded, each rank reading only the bytes of its own shard.

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    ferry.load_pretrained(model, "/vol/Qwen2.5-3B")   # or s3://bucket/Qwen2.5-3B

What it reads: the safetensors headers of ``model.safetensors`` (or of the
shards named by ``model.safetensors.index.json``), then, for each parameter
and persistent buffer of the model, the byte range of this rank's part of it:

* FSDP2 (``fully_shard``): parameters are DTensors; a dim-0 shard (FSDP2's
  only placement) is rows ``[r0, r1)`` of the tensor, one contiguous byte
  range. Other placements (``Shard(d)`` with d > 0, HSDP's ``Replicate``)
  read the rows that hold the local part and keep the local columns.
* FSDP1 with ``use_orig_params=True``: each original parameter is a view of
  this rank's piece of a flat parameter, elements ``[s, e]`` of the
  flattened tensor: one contiguous byte range too. FSDP1 needs
  ``use_orig_params=True`` (the flat parameter's layout is read from it),
  no ``cpu_offload``, and a materialised model: build it on CPU, or on meta
  with ``param_init_fn=lambda m: m.to_empty(device=..., recurse=False)``.
* Unsharded (DDP, one process): whole tensors.

A model whose tensors are on the meta device is first materialised with
``model.to_empty(device=...)``: the DTensors' mesh device for a sharded
model, ``device`` (default CPU) otherwise.

Casting: each stored tensor is converted to the model tensor's dtype with
``Tensor.to`` (round to nearest even), as ``from_pretrained(dtype=...)``
does. ``dtype=X`` asks that the model's floating-point tensors be ``X``: an
unsharded model is converted, a sharded one must have been built with
``dtype=X`` (else :class:`LoadError`).

Tied weights (``lm_head.weight`` is ``model.embed_tokens.weight``) are one
tensor: loaded from whichever of its names the checkpoint has.
Non-persistent buffers (rotary ``inv_freq`` and the like) are not in
checkpoints: for a transformers model they are recomputed by the model's
own ``_init_weights`` on the modules that hold them, as ``from_pretrained``
does; for another model they are kept, or, left on meta, an error.

Errors: everything is checked before any tensor is written: the headers
(:class:`CheckpointError` naming the file and tensor: a truncated file, a
header or data offsets past the end of the file, an unknown dtype, a size
that does not match the shape), the key sets (:class:`LoadError` listing
the missing and unexpected keys) and each tensor's shape (:class:`LoadError`
naming file and tensor). An I/O error while reading raises too; the model's
contents are then unspecified (rebuild it), never returned as if loaded.

``path`` is a local directory (any mounted volume) or ``s3://bucket/prefix``
(read by ferry's Go S3 client through ``ferry-serve``); with
``serve=SOCKET`` the node's ``ferry-serve`` reads each needed byte once and
the node's ranks copy their ranges out of its shared memory
(:mod:`ferry.weights_client`).
"""

import json
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from .errors import CheckpointError, LoadError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_HEADER = 100 << 20  # as the safetensors library: a larger header is refused

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
}
_ITEMSIZE = {k: torch.empty((), dtype=v).element_size() for k, v in DTYPES.items()}

# Prefixes that wrappers add to parameter names (FSDP1, activation
# checkpointing, torch.compile).
_WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


class TensorInfo:
    """One tensor of a safetensors file: ``begin`` is its absolute byte offset."""

    __slots__ = ("file", "where", "name", "dtype", "shape", "begin", "nbytes")

    def __init__(self, file, name, dtype, shape, begin, nbytes):
        self.file, self.name, self.dtype, self.shape, self.begin, self.nbytes = file, name, dtype, shape, begin, nbytes
        self.where = file  # the file as messages name it

    @property
    def itemsize(self):
        return _ITEMSIZE[self.dtype]

    def __repr__(self):
        return f"TensorInfo({self.file!r}, {self.name!r}, {self.dtype}, {self.shape}, @{self.begin}+{self.nbytes})"


def parse_header(head, file_size, file="<memory>"):
    """Parse and validate a safetensors header. ``head`` holds at least the
    file's first 8 bytes (the header length) and, when that length fits, the
    header itself. Returns (header length incl. the 8 bytes, {name:
    TensorInfo}). Raises :class:`CheckpointError` naming the file (and the
    tensor) for anything out of bounds or malformed."""
    if file_size < 8 or len(head) < 8:
        raise CheckpointError(f"{file}: {file_size} bytes, too short for a safetensors header (8-byte length)")
    (n,) = struct.unpack_from("<Q", head)
    if n > MAX_HEADER:
        raise CheckpointError(f"{file}: header length {n} is over the limit of {MAX_HEADER} bytes")
    if 8 + n > file_size:
        raise CheckpointError(f"{file}: header of {n} bytes ends at byte {8 + n}, past the end of the file "
                              f"({file_size} bytes): the file is truncated")
    if len(head) < 8 + n:
        raise CheckpointError(f"{file}: got {len(head)} bytes of an {8 + n}-byte header")
    try:
        meta = json.loads(bytes(head[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{file}: header is not valid JSON: {e}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{file}: header is a JSON {type(meta).__name__}, want an object")
    data_size = file_size - 8 - n
    out = {}
    for name, t in meta.items():
        if name == "__metadata__":
            if not isinstance(t, dict):
                raise CheckpointError(f"{file}: __metadata__ is a {type(t).__name__}, want an object")
            continue
        where = f"{file}: tensor {name!r}"
        if not isinstance(t, dict):
            raise CheckpointError(f"{where}: entry is a {type(t).__name__}, want an object")
        dt, shape, offs = t.get("dtype"), t.get("shape"), t.get("data_offsets")
        if not isinstance(dt, str) or dt not in DTYPES:
            raise CheckpointError(f"{where}: dtype {dt!r} is not one of {', '.join(DTYPES)}")
        if (not isinstance(shape, list) or len(shape) > 64
                or not all(type(d) is int and 0 <= d < 1 << 62 for d in shape)):
            raise CheckpointError(f"{where}: shape {shape!r}, want a list of non-negative integers")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise CheckpointError(f"{where}: data_offsets {offs!r}, want [begin, end] with 0 <= begin <= end")
        numel = 1
        for d in shape:
            numel *= d
        want = numel * _ITEMSIZE[dt]
        if offs[1] - offs[0] != want:
            raise CheckpointError(f"{where}: data_offsets {offs} hold {offs[1] - offs[0]} bytes, its dtype {dt} "
                                  f"and shape {shape} need {want}")
        if offs[1] > data_size:
            raise CheckpointError(f"{where}: data ends at byte {8 + n + offs[1]}, past the end of the file "
                                  f"({file_size} bytes): the file is truncated or the header is wrong")
        out[name] = TensorInfo(file, name, dt, tuple(shape), 8 + n + offs[0], want)
    return 8 + n, out


# -- sources -------------------------------------------------------------------------
class LocalSource:
    """Files of a local directory (or mounted volume), read with pread."""

    def __init__(self, root):
        self.root = os.fspath(root)
        self._fds = {}

    def name(self, file):
        return os.path.join(self.root, file)

    def _fd(self, file):
        fd = self._fds.get(file)
        if fd is None:
            try:
                fd = os.open(self.name(file), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                raise CheckpointError(f"{self.name(file)}: no such file") from None
            self._fds[file] = fd
        return fd

    def exists(self, file):
        return os.path.isfile(self.name(file))

    def read_small(self, file):
        try:
            with open(self.name(file), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise CheckpointError(f"{self.name(file)}: no such file") from None

    def size(self, file):
        return os.fstat(self._fd(file)).st_size

    def read_head(self, file, n):
        buf = bytearray(n)
        self.readinto(file, 0, buf)
        return buf

    def readinto(self, file, offset, buf):
        """Fill the writable buffer ``buf`` with the bytes at ``offset``."""
        mv = memoryview(buf).cast("B")
        fd, done = self._fd(file), 0
        while done < len(mv):
            n = os.preadv(fd, [mv[done:]], offset + done)
            if n == 0:
                raise CheckpointError(f"{self.name(file)}: file ends at byte {offset + done}, "
                                      f"want {len(mv) - done} more bytes (truncated while loading?)")
            done += n

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


def read_headers(src):
    """{name: TensorInfo} for the checkpoint of ``src`` (one file or the
    shards of an index); the weight map's files are checked to hold the
    tensors it names."""
    if src.exists(INDEX):
        try:
            index = json.loads(src.read_small(INDEX))
            weight_map = index["weight_map"]
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise TypeError("weight_map is not an object of file names")
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{src.name(INDEX)}: not a safetensors index: {e}") from None
        files = sorted(set(weight_map.values()))
        for f in files:
            if os.path.basename(f) != f or not f:
                raise CheckpointError(f"{src.name(INDEX)}: file {f!r} is not a plain file name")
    elif src.exists(SINGLE):
        weight_map, files = None, [SINGLE]
    else:
        raise CheckpointError(f"{src.name('')}: neither {INDEX} nor {SINGLE}: not a Hugging Face safetensors "
                              "model directory")
    tensors = {}
    for f in files:
        size = src.size(f)
        head = src.read_head(f, min(size, 1 << 16))
        if len(head) >= 8:
            (n,) = struct.unpack_from("<Q", head)
            if len(head) < 8 + n <= min(size, 8 + MAX_HEADER):
                head = src.read_head(f, 8 + n)
        _, got = parse_header(head, size, src.name(f))
        for name, t in got.items():
            if weight_map is not None and weight_map.get(name) != f:
                continue  # the index decides which file holds a tensor
            t.file = f  # the source's name; t.where the full one
            tensors[name] = t
    if weight_map is not None:
        lost = sorted(k for k, f in weight_map.items() if k not in tensors)
        if lost:
            raise CheckpointError(f"{src.name(INDEX)}: {len(lost)} tensors named by the index are not in their "
                                  f"files: " + ", ".join(f"{k!r} ({weight_map[k]})" for k in lost[:20]))
    return tensors


# -- the model -----------------------------------------------------------------------
def _clean(name):
    for p in _WRAPPER_PARTS:
        name = name.replace(p, "")
    return name


def _unwrap(model):
    """The module whose names are the checkpoint's (DDP's .module)."""
    ddp = torch.nn.parallel.DistributedDataParallel
    while isinstance(model, ddp):
        model = model.module
    return model


def _hf_model(model):
    """The transformers PreTrainedModel inside the wrappers, or None."""
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return None
    for m in model.modules():
        if isinstance(m, PreTrainedModel):
            return m
    return None


def _is_dtensor(t):
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(t, DTensor)


def _fsdp1_views(model):
    """{id(orig param): (full shape, first flat element, numel)} for the
    parameters FSDP1 (use_orig_params=True) holds in flat parameters."""
    out = {}
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # pragma: no cover
        return out
    for m in model.modules():
        if not isinstance(m, FSDP):
            continue
        if not m._use_orig_params:
            raise LoadError("ferry.load_pretrained: an FSDP1 model needs use_orig_params=True (each parameter is then "
                            "a view of this rank's flat-parameter shard); wrap it with use_orig_params=True")
        if m.cpu_offload.offload_params:
            raise LoadError("ferry.load_pretrained: FSDP1 with cpu_offload is not supported; load before "
                            "offloading or use FSDP2")
        h = m._handle
        if h is None:
            continue
        fp = h.flat_param
        for p, info, shape in zip(fp._params, fp._shard_param_infos, fp._shapes):
            if info.in_shard:
                out[id(p)] = (tuple(shape), info.intra_param_start_idx, info.numel_in_shard)
            else:
                out[id(p)] = (tuple(shape), 0, 0)
        # tied parameters (fp._shared_params) are the same objects as their
        # primaries in fp._params: already mapped
    return out


class _Target:
    """One model tensor to fill: its names, the local region, where to write."""

    __slots__ = ("names", "tensor", "kind", "shape", "region", "dest", "src")

    def __init__(self, names, tensor, kind, shape, region, dest):
        self.names = names      # checkpoint names it may come from (tied: several)
        self.tensor = tensor
        self.kind = kind        # "param" or "buffer"
        self.shape = shape      # the full (logical) shape
        self.region = region    # ("rows", r0, r1, index) or ("flat", s, n) or ("all",)
        self.dest = dest        # the local tensor written in place
        self.src = None         # TensorInfo


def _local_region(p):
    """(full shape, region, local tensor) of a DTensor."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape = tuple(p.shape)
    local = p._local_tensor
    lshape, off = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    lshape, off = tuple(lshape), tuple(off)
    if tuple(local.shape) != lshape:
        # FSDP2 keeps a padded local tensor; its to_local() is the unpadded view
        local = p.to_local()
    if not all(isinstance(pl, Shard) or pl.is_replicate() for pl in p.placements):
        raise LoadError(f"ferry.load_pretrained: DTensor placements {p.placements} are not supported "
                        "(Shard and Replicate are)")
    if len(shape) == 0:
        return shape, ("all",), local
    idx = tuple(slice(o, o + n) for o, n in zip(off[1:], lshape[1:]))
    return shape, ("rows", off[0], off[0] + lshape[0], idx), local


def _targets(model, device):
    """The model's tensors to load, and the non-persistent buffers."""
    root = _unwrap(model)
    fsdp1 = _fsdp1_views(root)
    by_id = {}
    order = []
    for name, p in root.named_parameters(remove_duplicate=False):
        key = id(p)
        if key not in by_id:
            by_id[key] = ([], p, "param")
            order.append(key)
        by_id[key][0].append(_clean(name))
    nonpersistent = []
    for mname, m in root.named_modules(remove_duplicate=False):
        np_names = getattr(m, "_non_persistent_buffers_set", ())
        for bname, b in m._buffers.items():
            if b is None:
                continue
            full = _clean(f"{mname}.{bname}" if mname else bname)
            if bname in np_names:
                nonpersistent.append((full, m, bname))
                continue
            key = id(b)
            if key not in by_id:
                by_id[key] = ([], b, "buffer")
                order.append(key)
            if full not in by_id[key][0]:
                by_id[key][0].append(full)
    out = []
    for key in order:
        names, t, kind = by_id[key]
        if _is_dtensor(t):
            shape, region, dest = _local_region(t)
        elif key in fsdp1:
            shape, s, n = fsdp1[key]
            region, dest = ("flat", s, n), t.data
        else:
            shape, region, dest = tuple(t.shape), ("all",), t.data
        out.append(_Target(names, t, kind, shape, region, dest))
    return out, nonpersistent


def _materialise(model, device):
    """to_empty() a model that has meta tensors; returns True if it did."""
    tensors = list(model.parameters()) + list(model.buffers())
    if not any(t.is_meta for t in tensors):
        return False
    if device is None:
        device = torch.device("cpu")
        for t in tensors:
            if _is_dtensor(t):
                mesh = t.device_mesh
                device = torch.device(mesh.device_type)
                if mesh.device_type == "cuda":
                    device = torch.device("cuda", torch.cuda.current_device())
                break
    # to_empty() gives each module its own new tensor: tied ones must be
    # tied again (transformers ties them in from_pretrained too)
    shared = {}
    for m in model.modules():
        for slots in (m._parameters, m._buffers):
            for n, t in slots.items():
                if t is not None:
                    shared.setdefault(id(t), []).append((slots, n))
    model.to_empty(device=device)
    for where in shared.values():
        first = where[0][0][where[0][1]]
        for slots, n in where[1:]:
            slots[n] = first
    return True


def _recompute_buffers(model, nonpersistent, was_meta):
    """Recompute non-persistent buffers as from_pretrained does: the
    transformers model's own _init_weights on each module that holds one."""
    if not nonpersistent:
        return
    hf = _hf_model(model)
    if hf is None:
        if was_meta:
            raise LoadError("ferry.load_pretrained: the model was on the meta device and is not a transformers "
                            "model, so its non-persistent buffers cannot be recomputed: "
                            + ", ".join(n for n, _, _ in nonpersistent[:10]))
        return
    from transformers import initialization as init

    seen = set()
    with torch.no_grad(), init.guard_torch_init_functions():
        for _, m, bname in nonpersistent:
            b = m._buffers[bname]
            if b.is_floating_point() and b.dtype != torch.float32:
                # from_pretrained computes them in float32 and never casts
                # them (from_config(dtype=...) does)
                m._buffers[bname] = torch.empty_like(b, dtype=torch.float32)
        for _, m, _ in nonpersistent:
            if id(m) in seen:
                continue
            seen.add(id(m))
            hf._init_weights(m)


def _plan(targets, tensors, path):
    """Match targets with checkpoint tensors; raise LoadError on any mismatch."""
    used = set()
    missing = []
    for t in targets:
        for n in t.names:
            if n in tensors:
                t.src = tensors[n]
                break
        if t.src is None:
            missing.append(t.names[0])
        used.update(t.names)
    unexpected = sorted(k for k in tensors if k not in used)
    if missing or unexpected:
        msg = [f"ferry.load_pretrained: {path} does not fit the model:"]
        if missing:
            msg.append(f"{len(missing)} missing keys (in the model, not in the checkpoint): "
                       + ", ".join(missing[:30]) + (" ..." if len(missing) > 30 else ""))
        if unexpected:
            msg.append(f"{len(unexpected)} unexpected keys (in the checkpoint, not in the model): "
                       + ", ".join(unexpected[:30]) + (" ..." if len(unexpected) > 30 else ""))
        raise LoadError("\n  ".join(msg))
    for t in targets:
        s = t.src
        if s.shape != t.shape:
            raise LoadError(f"ferry.load_pretrained: {s.where}: tensor {s.name!r} has shape {list(s.shape)}, the "
                            f"model's {t.names[0]} has {list(t.shape)}")
        sdt, ddt = DTYPES[s.dtype], t.dest.dtype
        if sdt.is_floating_point != ddt.is_floating_point or (sdt == torch.bool) != (ddt == torch.bool):
            raise LoadError(f"ferry.load_pretrained: {s.where}: tensor {s.name!r} is {s.dtype}, the model's "
                            f"{t.names[0]} is {ddt}: not a cast from_pretrained makes")


def _reads(t):
    """(byte offset, nbytes, local shape or None) of the target's region."""
    s = t.src
    isz = s.itemsize
    kind = t.region[0]
    if kind == "all":
        return s.begin, s.nbytes
    if kind == "flat":
        _, start, n = t.region
        return s.begin + start * isz, n * isz
    _, r0, r1, _ = t.region
    row = s.nbytes // s.shape[0] if s.shape[0] else 0
    return s.begin + r0 * row, (r1 - r0) * row


def _place(t, raw):
    """Write the raw little-endian bytes ``raw`` (a uint8 tensor) of the
    target's region into its local tensor, cast to its dtype."""
    s = t.src
    v = raw.view(DTYPES[s.dtype])
    kind = t.region[0]
    if kind == "all":
        v = v.view(s.shape)
    elif kind == "rows":
        _, r0, r1, idx = t.region
        v = v.view((r1 - r0,) + tuple(s.shape[1:]))
        if idx and any(sl.start != 0 or sl.stop != d for sl, d in zip(idx, s.shape[1:])):
            v = v[(slice(None),) + idx]
    with torch.no_grad():
        t.dest.copy_(v.view(t.dest.shape) if kind == "flat" else v)


def _direct(t, n):
    """The destination's own bytes (a writable uint8 array) when the region's
    n bytes can be read straight into it: a CPU tensor, contiguous, of the
    checkpoint's dtype, whose region is all of it (no cast, no column slice).
    None otherwise: the bytes go through a buffer and _place."""
    d = t.dest
    if d.device.type != "cpu" or d.dtype != DTYPES[t.src.dtype] or not d.is_contiguous():
        return None
    if d.numel() * d.element_size() != n:
        return None
    if t.region[0] == "rows":
        _, _, _, idx = t.region
        if idx and any(sl.start != 0 or sl.stop != dim for sl, dim in zip(idx, t.src.shape[1:])):
            return None
    if n == 0:
        return None
    return d.detach().view(-1).view(torch.uint8).numpy()


def load_pretrained(model, path, *, serve=None, dtype=None, device=None, threads=8, stats=None):
    """Load the safetensors weights at ``path`` into ``model`` in place and
    return it. See the module doc for the forms of ``model`` and ``path``.

    Args:
        model: a ``torch.nn.Module`` (a transformers model, possibly wrapped
            by DDP, FSDP1 with ``use_orig_params=True``, or sharded by
            FSDP2 ``fully_shard``), on the meta device or materialised.
        path: an HF model directory, local or ``s3://bucket/prefix``.
        serve: the socket of this node's ``ferry-serve`` (``True``: the
            default socket): it reads each byte once per node and the
            ranks copy their ranges out of its shared memory.
        dtype: the floating-point dtype the model's tensors must have (an
            unsharded model is converted), as ``from_pretrained(dtype=)``.
        device: where a meta-device model is materialised (default: the
            DTensors' mesh device, else CPU).
        threads: concurrent reads (default 8).
        stats: a dict to fill with what this rank did: ``bytes`` (read for
            its tensors), ``tensors``, ``files``, ``seconds``.
    """
    t0 = time.monotonic()
    path = os.fspath(path)
    if path.startswith("s3://") and serve is None:
        raise LoadError(f"ferry.load_pretrained: {path}: s3:// models are read by the node's ferry-serve (ferry's Go "
                        "S3 reader, each byte once per node): start `ferry-serve --socket SOCKET` and pass "
                        "serve=SOCKET")
    if serve is not None:
        from .weights_client import ServeSource

        src = ServeSource(path, serve)
    else:
        src = LocalSource(path)
    try:
        tensors = read_headers(src)
        root = _unwrap(model)
        if dtype is not None:
            _check_dtype(root, dtype)
        was_meta = _materialise(root, device)
        targets, nonpersistent = _targets(root, device)
        _plan(targets, tensors, path)
        _recompute_buffers(root, nonpersistent, was_meta)
        nbytes = _load(src, targets, threads)
    finally:
        src.close()
    if stats is not None:
        stats.update(bytes=nbytes, tensors=len(targets), files=len({t.src.file for t in targets}),
                     seconds=time.monotonic() - t0)
    return model


def _persistent_buffers(root):
    """(name, buffer) of the buffers a state dict holds."""
    for mname, m in root.named_modules():
        skip = getattr(m, "_non_persistent_buffers_set", ())
        for bname, b in m._buffers.items():
            if b is not None and bname not in skip:
                yield f"{mname}.{bname}" if mname else bname, b


def _check_dtype(root, dtype):
    """dtype= (non-persistent buffers aside: from_pretrained keeps them in
    float32, _recompute_buffers does too)."""
    bad = [(_clean(n), t.dtype) for n, t in list(root.named_parameters()) + list(_persistent_buffers(root))
           if t.dtype.is_floating_point and t.dtype != dtype]
    if not bad:
        return
    sharded = any(_is_dtensor(t) for t in root.parameters()) or bool(_fsdp1_views(root))
    keep = set(getattr(_hf_model(root), "_keep_in_fp32_modules", None) or [])
    if sharded:
        n, d = bad[0]
        raise LoadError(f"ferry.load_pretrained: dtype={dtype} but {n} is {d}: build the model with "
                        f"from_config(config, dtype={dtype}) before sharding it")
    for n, m in root.named_modules():
        if not any(k in n.split(".") for k in keep):
            skip = getattr(m, "_non_persistent_buffers_set", ())
            bufs = [b for k, b in m._buffers.items() if b is not None and k not in skip]
            for t in list(m.parameters(recurse=False)) + bufs:
                if t.dtype.is_floating_point and t.dtype != dtype:
                    t.data = t.data.to(dtype)


def _load(src, targets, threads):
    """Read every target's region and write it into place."""
    jobs = []
    for t in targets:
        off, n = _reads(t)
        if n:
            jobs.append((t.src.file, off, n, t))
    jobs.sort(key=lambda j: (j[0], j[1]))
    total = sum(j[2] for j in jobs)

    def one(job):
        f, off, n, t = job
        dst = _direct(t, n)
        if dst is not None:
            src.readinto(f, off, dst)
            return
        buf = torch.empty(n, dtype=torch.uint8)
        src.readinto(f, off, buf.numpy())
        _place(t, buf)

    # file by file: a source that maps whole files (ferry-serve) holds one
    # at a time
    acquire, release = getattr(src, "acquire", None), getattr(src, "release", None)
    files = sorted({j[0] for j in jobs})
    with ThreadPoolExecutor(max_workers=max(1, threads)) as ex:
        for f in files:
            mine = [j for j in jobs if j[0] == f]
            if acquire is not None:
                acquire(f)
            try:
                for _ in ex.map(one, mine):
                    pass
            finally:
                if release is not None:
                    release(f)
    return total
