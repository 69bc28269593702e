#!/usr/bin/env python3
"""check_with_torch.py CKPT_DIR OUT_FILE DTYPE|keep [CKPT_DIR OUT_FILE DTYPE|keep ...]

Independent check of a ckptmerge output with PyTorch + numpy (no safetensors
package needed): parses the safetensors header with json, reads every tensor
with np.frombuffer, loads the DCP checkpoint with torch's own DCP reader
(dcp.load with no_dist=True) into full tensors, and compares values
(bit-exact; with DTYPE the torch tensor is first converted with .to(dtype),
for floating tensors only). Prints "ok N" and exits 0, or exits 1.

Runs with the test venv's torch 2.x (ckpt/python_test.go finds it through
internal/testutil/pyenv). The checkpoints may come from torch 1.13, which
pickled its classes under torch.distributed._shard.checkpoint.*: torch 2.x
keeps that package only as an alias of torch.distributed.checkpoint, and a
submodule imported through the alias is a second copy whose classes DCP's
own isinstance checks reject, so the old module paths are pointed at the
real modules before any metadata is read.
"""
import importlib
import json
import struct
import sys
import warnings

import numpy as np
import torch
import torch.distributed.checkpoint as dcp

# no_dist=True is what we want, said once per load
warnings.filterwarnings("ignore", message="torch.distributed is disabled")

for _m in ("metadata", "filesystem"):
    sys.modules.setdefault("torch.distributed._shard.checkpoint." + _m,
                           importlib.import_module("torch.distributed.checkpoint." + _m))

NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.int16, "I64": np.int64,
      "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
TORCH = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
         "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
         "BOOL": torch.bool}


def main():
    args = sys.argv[1:]
    if not args or len(args) % 3:
        print(__doc__)
        return 2
    total = 0
    for i in range(0, len(args), 3):
        n = check(args[i], args[i + 1], None if args[i + 2] == "keep" else TORCH[args[i + 2]])
        if n < 0:
            print(f"FAILED: {args[i]} -> {args[i + 1]} ({args[i + 2]})")
            return 1
        total += n
    print("ok", total)
    return 0


def check(ckpt, out, cast):
    raw = open(out, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt"}
    data = raw[8 + n:]
    md = dcp.FileSystemReader(ckpt).read_metadata()
    sd = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, dcp.TensorStorageMetadata):
            sd[k] = torch.empty(v.size, dtype=v.properties.dtype)
        else:
            sd[k] = None
    dcp.load(sd, storage_reader=dcp.FileSystemReader(ckpt), no_dist=True)
    tensors = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    if set(tensors) != set(header):
        print("tensor names differ:", sorted(set(tensors) ^ set(header)))
        return -1
    end = 0
    for name, e in header.items():
        t = tensors[name]
        if cast is not None and t.is_floating_point():
            t = t.to(cast)
        b, f = e["data_offsets"]
        end = max(end, f)
        arr = np.frombuffer(data[b:f], dtype=NP[e["dtype"]]).reshape(e["shape"])
        if TORCH[e["dtype"]] != t.dtype or list(t.shape) != e["shape"]:
            print(f"{name}: {e['dtype']} {e['shape']} in file, torch has {t.dtype} {list(t.shape)}")
            return -1
        ref = t.contiguous()
        ref = ref.view(torch.int16).numpy() if ref.dtype == torch.bfloat16 else ref.numpy()
        if arr.tobytes() != ref.tobytes():
            bad = np.argwhere(arr.reshape(-1).view(np.uint8) != ref.reshape(-1).view(np.uint8))[:3]
            print(f"{name}: values differ (first differing bytes at {bad.reshape(-1).tolist()})")
            return -1
    if end != len(data):
        print(f"data section has {len(data)} bytes, tensors end at {end}")
        return -1
    return len(header)


if __name__ == "__main__":
    sys.exit(main())
