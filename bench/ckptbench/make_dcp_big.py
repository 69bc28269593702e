#!/usr/bin/env python3
"""make_dcp_big.py -- a large, REAL torch.distributed.checkpoint (DCP) checkpoint
for the ckptmerge benchmark, written by torch 1.13's own FileSystemWriter.

Usage
  /usr/bin/python3 make_dcp_big.py --big OUTDIR [--layers 14] [--hidden 2048]
      [--intermediate 5632] [--vocab 32000] [--kv-dim 256] [--world-size 4]

HF Llama parameter names, bf16, FSDP1 SHARDED_STATE_DICT layout (torch.chunk
along dim 0, ceil(n/ws) rows per rank), one .distcp file per rank plus one
bytes item ("step").  The defaults of bench/ckptbench/run.sh
(--layers 14) give 747,694,080 parameters = 1,495,388,160 tensor bytes.
Ported from ferry's DCP fixture generator (testdata/dcp/torch-1.13/README.md).

Debian's torch 1.13 does not import torch.distributed._shard on Python 3.11
(a dataclass field default that 3.11 rejects); python/ferry/dcp.py's
_allow_mutable_dataclass_defaults() turns such defaults into default_factory
while those modules are imported.  It changes nothing that is written to disk.
"""

import hashlib
import io
import json
import os
import pickletools
import struct
import sys


# Debian's torch 1.13 cannot import torch.distributed._shard on Python 3.11;
# the workaround lives once, in python/ferry/dcp.py, and wraps the imports.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from ferry.dcp import _allow_mutable_dataclass_defaults  # noqa: E402

with _allow_mutable_dataclass_defaults():
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    try:  # torch >= 2.0
        import torch.distributed.checkpoint as dcp
    except ImportError:  # torch 1.13
        import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor
    from torch.distributed._shard.sharded_tensor.metadata import (
        ShardedTensorMetadata,
        TensorProperties,
    )

    try:
        from torch.distributed.fsdp._shard_utils import _create_chunk_sharded_tensor
    except ImportError:  # moved in later versions; only the small fixtures use it
        _create_chunk_sharded_tensor = None

# ---------------------------------------------------------------------------
# deterministic tiny Llama-like model
# ---------------------------------------------------------------------------
def seed_of(name):
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def llama_shapes(vocab, hidden, inter, kv_dim, layers):
    """HF LlamaForCausalLM parameter names/shapes in module order."""
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
    s += [("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden])]
    return s


# ---------------------------------------------------------------------------
# sharding helpers
# ---------------------------------------------------------------------------
def fsdp1_layout(size, ws):
    """(offsets, sizes) per rank as FSDP1's torch.chunk(dim=0) gives them; None = owns nothing."""
    n = size[0]
    step = -(-n // ws)  # ceil
    res = []
    for r in range(ws):
        start = step * r
        if start >= n:
            res.append(None)
        else:
            res.append(([start] + [0] * (len(size) - 1), [min(step, n - start)] + list(size[1:])))
    return res


def st_from_local(local, rank, ws, global_size, dtype, layout):
    """ShardedTensor from this rank's piece; layout = list of (offsets,sizes)|None per rank."""
    mds = [ShardMetadata(o, s, f"rank:{r}/cpu") for r, os_ in enumerate(layout) if os_ is not None
           for (o, s) in [os_]]
    props = TensorProperties(dtype=dtype, layout=torch.strided, requires_grad=False,
                             memory_format=torch.contiguous_format, pin_memory=False)
    stmd = ShardedTensorMetadata(shards_metadata=mds, size=torch.Size(global_size), tensor_properties=props)
    shards = []
    if layout[rank] is not None:
        shards = [Shard.from_tensor_and_offsets(local, layout[rank][0], rank)]
    return ShardedTensor._init_from_local_shards_and_global_metadata(shards, sharded_tensor_metadata=stmd)


def _init_pg(rank, ws, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=ws)


# ---------------------------------------------------------------------------
# big synthetic checkpoint (benchmarks)
# ---------------------------------------------------------------------------
def big_worker(rank, ws, cfg, path, port):
    _init_pg(rank, ws, port)
    sd = {}
    for name, shape in llama_shapes(cfg["vocab"], cfg["hidden"], cfg["intermediate"], cfg["kv_dim"],
                                    cfg["layers"]):
        layout = fsdp1_layout(shape, ws)
        local = None
        if layout[rank] is not None:
            g = torch.Generator().manual_seed(seed_of(name) + rank)
            local = (0.02 * torch.randn(layout[rank][1], generator=g)).to(torch.bfloat16)
        sd[name] = st_from_local(local, rank, ws, shape, torch.bfloat16, layout)
    sd["step"] = 1000
    dcp.save_state_dict(sd, dcp.FileSystemWriter(path, single_file_per_rank=True))
    dist.barrier()
    dist.destroy_process_group()


def make_big(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", required=True)
    ap.add_argument("--layers", type=int, default=14)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--kv-dim", type=int, default=256)
    ap.add_argument("--world-size", type=int, default=4)
    a = ap.parse_args(argv)
    cfg = dict(layers=a.layers, hidden=a.hidden, intermediate=a.intermediate, vocab=a.vocab, kv_dim=a.kv_dim)
    n = sum(int(np.prod(s)) for _, s in llama_shapes(a.vocab, a.hidden, a.intermediate, a.kv_dim, a.layers))
    print(f"params={n} bf16 bytes={2 * n}", flush=True)
    os.makedirs(a.big, exist_ok=True)
    mp.spawn(big_worker, args=(a.world_size, cfg, a.big, 29700), nprocs=a.world_size, join=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--big":
        make_big(sys.argv[1:])
    else:
        print(__doc__)
        sys.exit(2)
