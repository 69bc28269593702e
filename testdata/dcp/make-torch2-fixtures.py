#!/usr/bin/env python3
"""make-torch2-fixtures.py -- DCP checkpoints in the torch >= 2.x on-disk layout,
written with the torch 1.13 that Debian ships, plus ground truth.

Usage
  /usr/bin/python3 make-torch2-fixtures.py OUTDIR            # small fixtures (committed)
  /usr/bin/python3 make-torch2-fixtures.py --big OUTDIR [--layers 16] [--hidden 2048]
        [--intermediate 5632] [--vocab 32000] [--kv-dim 256] [--world-size 4]
        # large synthetic checkpoint (random bf16 bits), 2.x layout, for
        # memory/throughput runs; no ground truth

Why a generator: torch >= 2.0 moved DCP to torch.distributed.checkpoint and
added fields (planner_data flatten mapping, storage_meta, version,
transform_descriptors); only torch 1.13 is installable here.  This script
injects stand-in modules under the 2.x module paths
(torch.distributed.checkpoint.metadata / .filesystem) whose classes pickle
exactly like the real dataclasses (NEWOBJ + BUILD of __dict__, TensorProperties
through a 5-tuple __getstate__, _StorageInfo dropping None fields,
BytesStorageMetadata without BUILD), and writes the .distcp files the way the
2.x FileSystemWriter does: several files per rank (thread_count=2), items back
to back, bytes items first, every item a torch.save archive at a recorded
offset.  The torch.save blobs come from real torch.save; some are re-zipped
with the extra records newer torch adds (byteorder, .format_version).

Fixtures (all from one tiny HF-Llama-shaped model saved the accelerate way,
dcp.save({"model": sd, "optimizer": osd}) => keys "model.<name>" and
"optimizer.state.<name>.exp_avg", planner_data maps them to their paths):
  torch2-ws4     4 ranks, 2 files per rank, FSDP2 Shard(0) chunks (uneven;
                 ranks past the end record a zero-size chunk, as DTensor does),
                 one tensor sharded on a 2x2 mesh (dims 0 and 1), replicated
                 norms de-duplicated to ranks other than 0, a non-contiguous
                 (transposed) tensor, optimizer exp_avg tensors and bytes
                 items, two items stored with transform "stream.zstd/1"
                 (compressed with the zstd command), storage_meta with a
                 pathlib.PosixPath checkpoint_id, version "1.0.0"
  torch2-rot13   1 rank, one item with transform "stream.rot13/1" (which
                 ckptmerge must reject)
  torch2-st-ws2  FileSystemWriter(serialization_format=SAFETENSORS): each
                 .distcp file holds the bytes items, then one safetensors
                 blob of that rank's chunks (DCP_SHARDING_INFO); tensor
                 items point at the blob start
  hf-sharded-ws4 the same model as torch's HuggingFaceStorageWriter
                 (save_distributed=True) writes it: one safetensors file per
                 rank, chunks keyed by FQN, DCP_SHARDING_INFO in __metadata__,
                 no .metadata
Each directory gets expected.safetensors (the model tensors under their HF
names, written with the safetensors library's conventions) and
expected.json (sha256 of every tensor, optimizer tensors included).
"""

import dataclasses
import enum
import hashlib
import io
import json
import os
import pathlib
import pickle
import struct
import subprocess
import sys
import types
import uuid
import zipfile
from typing import Any, Dict, List, Optional

import numpy as np
import torch

# ---------------------------------------------------------------------------
# stand-in torch.distributed.checkpoint modules (2.x class paths)
# ---------------------------------------------------------------------------
MD_MOD = "torch.distributed.checkpoint.metadata"
FS_MOD = "torch.distributed.checkpoint.filesystem"


def _module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


_pkg = _module("torch.distributed.checkpoint")
_pkg.__path__ = []
md_mod = _module(MD_MOD)
fs_mod = _module(FS_MOD)


def _register(mod, cls):
    cls.__module__ = mod.__name__
    cls.__qualname__ = cls.__name__
    setattr(mod, cls.__name__, cls)
    return cls


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


_register(md_mod, _MEM_FORMAT_ENCODING)


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


@dataclasses.dataclass
class TensorProperties:
    dtype: torch.dtype
    layout: torch.layout = torch.strided
    requires_grad: bool = False
    memory_format: torch.memory_format = torch.contiguous_format
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad,
                _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: List[ChunkStorageMetadata]


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: Optional[torch.Size] = None
    index: Optional[int] = dataclasses.field(hash=False, compare=False, default=None)


@dataclasses.dataclass
class StorageMeta:
    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: Dict[str, Any]
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[StorageMeta] = None
    version: Optional[str] = None


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: Optional[List[str]] = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}


for _c in (ChunkStorageMetadata, TensorProperties, TensorStorageMetadata, BytesStorageMetadata,
           MetadataIndex, StorageMeta, Metadata):
    _register(md_mod, _c)
_register(fs_mod, _StorageInfo)

# ---------------------------------------------------------------------------
# model, values, safetensors writer (same conventions as the 1.13 fixtures)
# ---------------------------------------------------------------------------
ST_DTYPE = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
            torch.uint8: "U8", torch.bool: "BOOL"}
ST_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
            "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
            "F64", "I64", "U64"]


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def st_bytes(tensors, metadata):
    items = sorted(tensors.items(), key=lambda kv: (-ST_ORDER.index(ST_DTYPE[kv[1].dtype]), kv[0]))
    header = {"__metadata__": metadata} if metadata is not None else {}
    off = 0
    for name, t in items:
        n = t.numel() * t.element_size()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(tensor_bytes(t) for _, t in items)


def seed_of(name):
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def value(name, shape, dtype):
    g = torch.Generator().manual_seed(seed_of(name))
    if len(shape) == 1 and "norm" in name:
        return (1.0 + 0.1 * torch.randn(shape, generator=g)).to(dtype)
    return (0.02 * torch.randn(shape, generator=g)).to(dtype)


def llama_shapes(vocab, hidden, inter, kv, layers):
    s = [("model.embed_tokens.weight", [vocab, hidden])]
    for i in range(layers):
        p = f"model.layers.{i}."
        s += [(p + "self_attn.q_proj.weight", [hidden, hidden]), (p + "self_attn.k_proj.weight", [kv, hidden]),
              (p + "self_attn.v_proj.weight", [kv, hidden]), (p + "self_attn.o_proj.weight", [hidden, hidden]),
              (p + "mlp.gate_proj.weight", [inter, hidden]), (p + "mlp.up_proj.weight", [inter, hidden]),
              (p + "mlp.down_proj.weight", [hidden, inter]), (p + "input_layernorm.weight", [hidden]),
              (p + "post_attention_layernorm.weight", [hidden])]
    return s + [("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden])]


# ---------------------------------------------------------------------------
# chunk layouts
# ---------------------------------------------------------------------------
def shard0(shape, ws):
    """DTensor Shard(0): ceil split; ranks past the end get a zero-size chunk."""
    n = shape[0]
    c = -(-n // ws)
    out = []
    for r in range(ws):
        lo = min(r * c, n)
        hi = min(lo + c, n)
        out.append(([lo] + [0] * (len(shape) - 1), [hi - lo] + list(shape[1:])))
    return out


def mesh2x2(shape):
    """FSDP x TP on a 2x2 mesh: dim 0 over mesh dim 0, dim 1 over mesh dim 1."""
    a, b = -(-shape[0] // 2), -(-shape[1] // 2)
    out = []
    for i in range(2):
        for j in range(2):
            o = [i * a, j * b]
            s = [min(a, shape[0] - o[0]), min(b, shape[1] - o[1])]
            out.append((o, s))
    return out


def blob(t, extra_records):
    """torch.save(t) bytes; with extra_records, re-zipped with newer torch's records."""
    b = io.BytesIO()
    torch.save(t, b)
    raw = b.getvalue()
    if not extra_records:
        return raw
    src = zipfile.ZipFile(io.BytesIO(raw))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        def put(name, data):  # fixed timestamps: the output is deterministic
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
        for n in src.namelist():
            put(n, src.read(n))
        put("archive/byteorder", "little")
        put("archive/.format_version", "1")
        put("archive/.storage_alignment", "64")
    return out.getvalue()


def zstd(data):
    return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, stdout=subprocess.PIPE, check=True).stdout


def rot13(data):
    return bytes(((c - 97 + 13) % 26 + 97) if 97 <= c <= 122 else c for c in data)


class Writer:
    """Collects items per (rank, file) and writes .distcp files + .metadata."""

    def __init__(self, path, ckpt_id):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.files = {}  # name -> list of (MetadataIndex, bytes, transforms)
        self.sdm = {}
        self.planner = {}
        self.ckpt_id = ckpt_id

    def add(self, fname, idx, data, transforms=None):
        self.files.setdefault(fname, []).append((idx, data, transforms))

    def finish(self):
        storage = {}
        for fname, items in sorted(self.files.items()):
            # bytes items first, then tensors (as the FileSystemWriter does)
            items.sort(key=lambda x: x[0].offset is not None)
            with open(os.path.join(self.path, fname), "wb") as f:
                for idx, data, tr in items:
                    off = f.tell()
                    f.write(data)
                    storage[idx] = _StorageInfo(fname, off, len(data), tr)
        md = Metadata(state_dict_metadata=self.sdm, planner_data=self.planner, storage_data=storage,
                      storage_meta=StorageMeta(checkpoint_id=pathlib.PosixPath(self.ckpt_id),
                                               save_id=str(uuid.UUID(int=seed_of(os.path.basename(self.path)))), load_id=None,
                                               modules=[]),
                      version="1.0.0")
        with open(os.path.join(self.path, ".metadata"), "wb") as f:
            pickle.dump(md, f, protocol=4)


def props(dtype):
    return TensorProperties(dtype=dtype)


def make_torch2(out, ws=4):
    w = Writer(os.path.join(out, "torch2-ws4"), "/ckpt/torch2-ws4")
    sd = {}
    opt = {}
    for name, shape in llama_shapes(vocab=37, hidden=33, inter=75, kv=11, layers=2):
        sd[name] = value(name, shape, torch.bfloat16)
    sd["extra.transposed"] = value("extra.transposed", [5, 7], torch.float32).t()  # strides (1,7)
    sd["extra.short"] = value("extra.short", [2, 3], torch.float16)  # 2 rows over 4 ranks
    sd["extra.step_count"] = torch.tensor(7, dtype=torch.int64)
    for name in ("model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.norm.weight"):
        opt["optimizer.state." + name + ".exp_avg"] = value("opt." + name, list(sd[name].shape), torch.float32)
    bytes_items = {"optimizer.param_groups.0.lr": 1e-4, "optimizer.param_groups.0.params": ["a", "b"],
                   "optimizer.state.model.embed_tokens.weight.step": 12.0}
    fileno = lambda r, i: f"__{r}_{i % 2}.distcp"  # noqa: E731  thread_count=2
    counter = [0] * ws
    zstd_left = 2
    for k, v in bytes_items.items():
        b = io.BytesIO()
        torch.save(v, b)
        idx = MetadataIndex(fqn=k, offset=None, index=None)
        w.add("__0_0.distcp", idx, b.getvalue())
        w.sdm[k] = BytesStorageMetadata()
        w.planner[k] = tuple(int(p) if p.isdigit() else p for p in k.split(".", 2)[:2]) + tuple(k.split(".")[2:])
    everything = [("model." + k, v) for k, v in sd.items()] + list(opt.items())
    for i, (k, t) in enumerate(everything):
        shape = list(t.shape)
        if k.endswith("norm.weight") or k.endswith("extra.transposed") or k.endswith("extra.step_count"):
            layout = [([0] * len(shape), shape)]
            owners = [seed_of(k) % (ws - 1) + 1]  # de-duplicated to some rank other than 0
        elif k.endswith("model.layers.1.mlp.down_proj.weight"):
            layout = mesh2x2(shape)
            owners = list(range(4))
        else:
            layout = shard0(shape, ws)
            owners = list(range(ws))
        chunks = []
        seen = set()
        for ci, ((o, s), r) in enumerate(zip(layout, owners)):
            if tuple(o) in seen:  # DCP de-duplicates items with equal (fqn, offsets)
                continue
            seen.add(tuple(o))
            ci = len(chunks)
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s)))
            if len(shape) == 0:
                piece = t
            else:
                piece = t
                for d in range(len(shape)):
                    piece = piece.narrow(d, o[d], s[d])
                if not k.endswith("extra.transposed"):
                    piece = piece.clone()  # DCP saves the local shard (contiguous)
            data = blob(piece, extra_records=(i % 2 == 0))
            tr = None
            if zstd_left and ci == 1 and len(layout) > 1:
                data, tr = zstd(data), ["stream.zstd/1"]
                zstd_left -= 1
            idx = MetadataIndex(fqn=k, offset=torch.Size(o), index=ci)
            w.add(fileno(r, counter[r]), idx, data, tr)
            counter[r] += 1
        w.sdm[k] = TensorStorageMetadata(properties=props(t.dtype), size=torch.Size(shape), chunks=chunks)
        if k.startswith("model."):
            w.planner[k] = ("model", k[len("model."):])
        else:
            w.planner[k] = ("optimizer", "state") + tuple(k[len("optimizer.state."):].rsplit(".", 1))
    w.finish()
    write_truth(w.path, sd, opt)
    return sd, opt, everything


def write_truth(path, sd, opt):
    model = dict(sd)
    with open(os.path.join(path, "expected.safetensors"), "wb") as f:
        f.write(st_bytes({k: v.contiguous() for k, v in model.items()}, {"format": "pt"}))
    entries = [{"key": k, "dtype": ST_DTYPE[v.dtype], "shape": list(v.shape),
                "sha256": hashlib.sha256(tensor_bytes(v)).hexdigest()} for k, v in list(model.items()) + list(opt.items())]
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump({"note": "model tensors under their output names; optimizer tensors under their DCP keys",
                   "entries": entries}, f, indent=1)
        f.write("\n")


def make_rot13(out):
    w = Writer(os.path.join(out, "torch2-rot13"), "/ckpt/torch2-rot13")
    t = value("w", [4, 3], torch.float32)
    w.add("__0_0.distcp", MetadataIndex(fqn="w", offset=torch.Size([0, 0]), index=0), rot13(blob(t, False)),
          ["stream.rot13/1"])
    w.sdm["w"] = TensorStorageMetadata(properties=props(t.dtype), size=torch.Size([4, 3]),
                                       chunks=[ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([4, 3]))])
    w.planner["w"] = ("w",)
    w.finish()


def make_hf_sharded(out, sd, ws=4):
    """torch HuggingFaceStorageWriter(save_distributed=True) layout, model keys only."""
    path = os.path.join(out, "hf-sharded-ws4")
    os.makedirs(path, exist_ok=True)
    per_rank = [dict() for _ in range(ws)]
    info = [dict() for _ in range(ws)]
    for k, t in sd.items():
        name = k
        shape = list(t.shape)
        if k.endswith("norm.weight") or k in ("extra.transposed", "extra.step_count"):
            layout, owners = [([0] * len(shape), shape)], [seed_of(k) % (ws - 1) + 1]
        elif k == "model.layers.1.mlp.down_proj.weight":
            layout, owners = mesh2x2(shape), list(range(4))
        else:
            layout, owners = shard0(shape, ws), list(range(ws))
        for (o, s), r in zip(layout, owners):
            if any(x == 0 for x in s):
                continue
            piece = t
            for d in range(len(shape)):
                piece = piece.narrow(d, o[d], s[d])
            per_rank[r][name] = piece.contiguous()
            info[r][name] = {"saved_offsets": o}
    for r in range(ws):
        meta = {"DCP_SHARDING_INFO": json.dumps(info[r]), "DCP_VERSION": "1.0", "format": "pt"}
        with open(os.path.join(path, f"shard-{r + 1:05d}-model-00001-of-00001.safetensors"), "wb") as f:
            f.write(st_bytes(per_rank[r], meta))
    write_truth(path, sd, {})


def make_dcp_safetensors(out, sd, ws=2):
    """FileSystemWriter(serialization_format=SAFETENSORS): per file the bytes items,
    then one safetensors blob with this file's chunks and DCP_SHARDING_INFO."""
    w = Writer(os.path.join(out, "torch2-st-ws2"), "/ckpt/torch2-st-ws2")
    per_rank = [dict() for _ in range(ws)]
    info = [dict() for _ in range(ws)]
    for k, t in sd.items():
        shape = list(t.shape)
        if k.endswith("norm.weight") or k in ("extra.transposed", "extra.step_count"):
            layout, owners = [([0] * len(shape), shape)], [seed_of(k) % ws]
        else:
            layout, owners = shard0(shape, ws), list(range(ws))
        chunks = []
        for ci, ((o, s), r) in enumerate(zip(layout, owners)):
            chunks.append(ChunkStorageMetadata(torch.Size(o), torch.Size(s)))
            piece = t
            for d in range(len(shape)):
                piece = piece.narrow(d, o[d], s[d])
            per_rank[r][k] = (piece.contiguous(), MetadataIndex(fqn=k, offset=torch.Size(o), index=ci))
            info[r][k] = {"saved_offsets": o}
        w.sdm[k] = TensorStorageMetadata(properties=props(t.dtype), size=torch.Size(shape), chunks=chunks)
        w.planner[k] = (k,)
    b = io.BytesIO()
    torch.save(1234, b)
    w.sdm["step"] = BytesStorageMetadata()
    w.planner["step"] = ("step",)
    storage = {MetadataIndex(fqn="step"): None}
    for r in range(ws):
        fname = f"__{r}_0.distcp"
        with open(os.path.join(w.path, fname), "wb") as f:
            if r == 0:
                f.write(b.getvalue())
                storage[MetadataIndex(fqn="step")] = _StorageInfo(fname, 0, len(b.getvalue()))
            start = f.tell()
            meta = {"DCP_SHARDING_INFO": json.dumps(info[r]), "DCP_VERSION": "1.0", "format": "pt"}
            f.write(st_bytes({k: v[0] for k, v in per_rank[r].items()}, meta))
            for k, (t, idx) in per_rank[r].items():
                storage[idx] = _StorageInfo(fname, start, t.numel() * t.element_size())
    md = Metadata(state_dict_metadata=w.sdm, planner_data=w.planner, storage_data=storage,
                  storage_meta=None, version="1.0.0")
    with open(os.path.join(w.path, ".metadata"), "wb") as f:
        pickle.dump(md, f, protocol=4)
    write_truth(w.path, sd, {})


def make_big(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", required=True)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--kv-dim", type=int, default=256)
    ap.add_argument("--world-size", type=int, default=4)
    a = ap.parse_args(argv)
    ws = a.world_size
    os.makedirs(a.big, exist_ok=True)
    rng = np.random.default_rng(1)
    files = [open(os.path.join(a.big, f"__{r}_0.distcp"), "wb") for r in range(ws)]
    sdm, storage, planner = {}, {}, {}
    total = 0
    for k, shape in llama_shapes(a.vocab, a.hidden, a.intermediate, a.kv_dim, a.layers):
        chunks = []
        for r, (o, s) in enumerate(shard0(shape, ws)):
            chunks.append(ChunkStorageMetadata(torch.Size(o), torch.Size(s)))
            n = int(np.prod(s))
            bits = rng.integers(0x3c00, 0x3d00, size=n, dtype=np.uint16)  # small positive bf16 values
            t = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).reshape(s)
            f = files[r]
            off = f.tell()
            torch.save(t, f)
            storage[MetadataIndex("model." + k, torch.Size(o), r)] = _StorageInfo(f"__{r}_0.distcp", off, f.tell() - off)
            total += n * 2
        sdm["model." + k] = TensorStorageMetadata(props(torch.bfloat16), torch.Size(shape), chunks)
        planner["model." + k] = ("model", k)
    for f in files:
        f.close()
    md = Metadata(sdm, planner, storage, StorageMeta(pathlib.PosixPath(a.big), str(uuid.uuid4()), None, []), "1.0.0")
    with open(os.path.join(a.big, ".metadata"), "wb") as f:
        pickle.dump(md, f, protocol=4)
    print(json.dumps({"tensor_bytes": total, "dir": a.big}))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--big":
        make_big(sys.argv[1:])
    elif len(sys.argv) == 2:
        sd, opt, _ = make_torch2(sys.argv[1])
        make_rot13(sys.argv[1])
        make_hf_sharded(sys.argv[1], sd)
        make_dcp_safetensors(sys.argv[1], sd)
        print("ok")
    else:
        print(__doc__)
        sys.exit(2)
