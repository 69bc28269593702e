#!/usr/bin/env python3
"""make-dcp-checkpoint.py -- a large synthetic FSDP-style checkpoint, written
by PyTorch's own torch.distributed.checkpoint, for the ckptmerge benchmark.

Usage
  /usr/bin/python3 bench/anchors/make-dcp-checkpoint.py --big OUT_DIR [--layers 16]
      [--hidden 2048] [--intermediate 5632] [--vocab 32000] [--kv-dim 256] [--world-size 4]

The defaults make a Llama-shaped bf16 model of ~0.75 G parameters (~1.5 GB).
Every rank builds the ShardedTensor that FSDP1's SHARDED_STATE_DICT builds
(torch.chunk along dim 0, ceil(n/ws) rows per rank, trailing ranks may own
nothing) with seeded random values, and the ranks save it together with
dcp.save_state_dict(single_file_per_rank=True) over gloo on 127.0.0.1 (FSDP
itself needs CUDA in torch 1.13). Parameter names are HF Llama's.

Debian's torch 1.13 does not import torch.distributed._shard on Python 3.11
(a dataclass default 3.11 rejects); the shim below turns such defaults into
default_factory while those modules import. It changes nothing on disk.

Ported from ferry's reference fixture generator make-dcp-fixtures.py
(Apache-2.0), --big mode only; bench/cmd/bench uses bench/ckptbench's
generator when there is one, this one otherwise.
"""

import copy
import dataclasses
import hashlib
import os
import socket
import sys


def _py311_dataclass_shim():
    orig = dataclasses._get_field

    def unhashable_dc(v):
        return dataclasses.is_dataclass(type(v)) and type(v).__hash__ is None

    def patched(cls, a_name, a_type, *rest):
        default = cls.__dict__.get(a_name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            if default.default is not dataclasses.MISSING and unhashable_dc(default.default):
                d = default.default
                default.default = dataclasses.MISSING
                default.default_factory = lambda d=d: copy.deepcopy(d)
        elif default is not dataclasses.MISSING and unhashable_dc(default):
            setattr(cls, a_name, dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d)))
        return orig(cls, a_name, a_type, *rest)

    dataclasses._get_field = patched


_py311_dataclass_shim()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

try:  # torch >= 2.0
    import torch.distributed.checkpoint as dcp  # noqa: E402
except ImportError:  # torch 1.13
    import torch.distributed._shard.checkpoint as dcp  # noqa: E402
from torch.distributed._shard.metadata import ShardMetadata  # noqa: E402
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor  # noqa: E402
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties  # noqa: E402


def seed_of(name):
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def llama_shapes(vocab, hidden, inter, kv_dim, layers):
    """HF LlamaForCausalLM parameter names and shapes, in module order."""
    s = [("model.embed_tokens.weight", [vocab, hidden])]
    for i in range(layers):
        p = f"model.layers.{i}."
        s += [
            (p + "self_attn.q_proj.weight", [hidden, hidden]),
            (p + "self_attn.k_proj.weight", [kv_dim, hidden]),
            (p + "self_attn.v_proj.weight", [kv_dim, hidden]),
            (p + "self_attn.o_proj.weight", [hidden, hidden]),
            (p + "mlp.gate_proj.weight", [inter, hidden]),
            (p + "mlp.up_proj.weight", [inter, hidden]),
            (p + "mlp.down_proj.weight", [hidden, inter]),
            (p + "input_layernorm.weight", [hidden]),
            (p + "post_attention_layernorm.weight", [hidden]),
        ]
    return s + [("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden])]


def fsdp1_layout(size, ws):
    """(offsets, sizes) per rank as FSDP1's torch.chunk(dim=0) gives them; None = owns nothing."""
    n = size[0]
    step = -(-n // ws)
    res = []
    for r in range(ws):
        start = step * r
        if start >= n:
            res.append(None)
        else:
            res.append(([start] + [0] * (len(size) - 1), [min(step, n - start)] + list(size[1:])))
    return res


def sharded(local, rank, global_size, dtype, layout):
    mds = [ShardMetadata(o, s, f"rank:{r}/cpu") for r, os_ in enumerate(layout) if os_ is not None
           for (o, s) in [os_]]
    props = TensorProperties(dtype=dtype, layout=torch.strided, requires_grad=False,
                             memory_format=torch.contiguous_format, pin_memory=False)
    md = ShardedTensorMetadata(shards_metadata=mds, size=torch.Size(global_size), tensor_properties=props)
    shards = [] if layout[rank] is None else [Shard.from_tensor_and_offsets(local, layout[rank][0], rank)]
    return ShardedTensor._init_from_local_shards_and_global_metadata(shards, sharded_tensor_metadata=md)


def worker(rank, ws, cfg, path, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=ws)
    sd = {}
    for name, shape in llama_shapes(cfg["vocab"], cfg["hidden"], cfg["intermediate"], cfg["kv_dim"], cfg["layers"]):
        layout = fsdp1_layout(shape, ws)
        local = None
        if layout[rank] is not None:
            g = torch.Generator().manual_seed(seed_of(name) + rank)
            local = (0.02 * torch.randn(layout[rank][1], generator=g)).to(torch.bfloat16)
        sd[name] = sharded(local, rank, shape, torch.bfloat16, layout)
    sd["step"] = 1000
    dcp.save_state_dict(sd, dcp.FileSystemWriter(path, single_file_per_rank=True))
    dist.barrier()
    dist.destroy_process_group()


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="synthetic FSDP-style DCP checkpoint for benchmarks")
    ap.add_argument("--big", required=True, metavar="OUT_DIR")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--kv-dim", type=int, default=256)
    ap.add_argument("--world-size", type=int, default=4)
    a = ap.parse_args(argv)
    cfg = dict(layers=a.layers, hidden=a.hidden, intermediate=a.intermediate, vocab=a.vocab, kv_dim=a.kv_dim)
    n = 0
    for _, s in llama_shapes(a.vocab, a.hidden, a.intermediate, a.kv_dim, a.layers):
        k = 1
        for d in s:
            k *= d
        n += k
    print(f"params={n} bf16 bytes={2 * n}", flush=True)
    os.makedirs(a.big, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a.world_size, cfg, a.big, port), nprocs=a.world_size, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])
