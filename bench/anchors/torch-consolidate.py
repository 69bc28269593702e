#!/usr/bin/env python3
"""torch-consolidate.py -- the PyTorch way to merge a DCP checkpoint, timed
phase by phase: the anchor ckptmerge is measured against (bench/cmd/bench).

Usage
  /usr/bin/python3 bench/anchors/torch-consolidate.py CKPT_DIR OUT_DIR --format torch|safetensors

What it does (single process, no process group)
  1. FileSystemReader(CKPT_DIR).read_metadata()            (unpickle .metadata)
  2. torch.empty(full size, dtype) for every tensor key     (bytes keys -> None)
  3. load_state_dict(sd, FileSystemReader(CKPT_DIR), no_dist=True)
     DCP's own resharding: every saved chunk is torch.load()ed from its
     offset/length slice and copied into the full tensor.
     torch >= 2.2 offers the same through dcp_to_torch_save /
     _EmptyStateDictLoadPlanner (used by accelerate merge-weights); torch 1.13
     has neither, so the full tensors are pre-allocated from the metadata.
  4a --format torch:       torch.save(sd, OUT_DIR/pytorch_model.bin)
  4b --format safetensors: OUT_DIR/model.safetensors written by a numpy-based
     writer (header as the safetensors library writes it, tensor bytes
     streamed with no extra copy); bytes items are left out
  5. fsync of the output file (timed separately)
Prints one JSON line with the phase timings, then the bench line the
harness reads: {"bench": {"total_s", "load_state_dict_s", "write_s", ...}}.
The harness measures wall time and peak RSS of the process itself.
Debian's torch 1.13 on Python 3.11 needs python/ferry/dcp.py's dataclass
workaround to import its DCP modules (it changes nothing on disk).

Ported from ferry's reference baseline torch-consolidate-baseline.py
(Apache-2.0); the bench line is an addition.
"""

import json
import os
import struct
import sys
import time


# Debian's torch 1.13 cannot import torch.distributed._shard on Python 3.11;
# the workaround lives once, in python/ferry/dcp.py, and wraps the imports.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from ferry.dcp import _allow_mutable_dataclass_defaults  # noqa: E402

with _allow_mutable_dataclass_defaults():
    import torch

    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        import torch.distributed._shard.checkpoint as dcp

ST_DTYPE = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
            torch.uint8: "U8", torch.bool: "BOOL"}
ST_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
            "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
            "F64", "I64", "U64"]


def write_safetensors(f, tensors):
    items = sorted(tensors.items(), key=lambda kv: (-ST_ORDER.index(ST_DTYPE[kv[1].dtype]), kv[0]))
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, t in items:
        n = t.numel() * t.element_size()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    f.write(struct.pack("<Q", len(hb)))
    f.write(hb)
    for _, t in items:
        t = t.contiguous()
        a = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
        f.write(memoryview(a).cast("B"))
    return 8 + len(hb) + off


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--format", choices=["torch", "safetensors"], required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    res = {"torch": torch.__version__, "format": a.format}
    t0 = time.perf_counter()
    md = dcp.FileSystemReader(a.ckpt).read_metadata()
    t1 = time.perf_counter()
    sd = {}
    nbytes = 0
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, dcp.TensorStorageMetadata):
            sd[k] = torch.empty(v.size, dtype=v.properties.dtype)
            nbytes += sd[k].numel() * sd[k].element_size()
        else:
            sd[k] = None
    t2 = time.perf_counter()
    dcp.load_state_dict(sd, dcp.FileSystemReader(a.ckpt), no_dist=True)
    t3 = time.perf_counter()
    if a.format == "torch":
        path = os.path.join(a.out, "pytorch_model.bin")
        with open(path, "wb") as f:
            torch.save(sd, f)
            f.flush()
            t4 = time.perf_counter()
            os.fsync(f.fileno())
    else:
        path = os.path.join(a.out, "model.safetensors")
        with open(path, "wb") as f:
            write_safetensors(f, {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)})
            f.flush()
            t4 = time.perf_counter()
            os.fsync(f.fileno())
    t5 = time.perf_counter()
    res.update({"tensor_bytes": nbytes, "out_bytes": os.path.getsize(path),
                "read_metadata_s": round(t1 - t0, 3), "alloc_s": round(t2 - t1, 3),
                "load_state_dict_s": round(t3 - t2, 3), "write_s": round(t4 - t3, 3),
                "fsync_s": round(t5 - t4, 3), "total_s": round(t5 - t0, 3)})
    print(json.dumps(res), flush=True)
    print(json.dumps({"bench": {k: v for k, v in res.items() if isinstance(v, (int, float))}}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
