#!/usr/bin/env python3
"""make_dcp_big_torch2.py -- a large checkpoint in FSDP2's layout, written by
torch >= 2.4's own dcp.save, for ckptmerge against the torch 2.x anchors
(bench/anchors/torch2-consolidate.py).

Usage
  python make_dcp_big_torch2.py OUTDIR [--layers 14] [--hidden 2048]
      [--intermediate 5632] [--vocab 32000] [--kv-dim 256] [--world-size 4]
      [--hf-out DIR]

HF-Llama shapes (defaults: hidden 2048, k/v 256, MLP
5632, vocab 32000, untied lm_head; 14 layers = 1.5 GB), bf16, random
values; WORLD_SIZE gloo processes on CPU each hold a DTensor Shard(0) of
every tensor (what fully_shard gives) and save {"model": state_dict} with
FileSystemWriter, one file per rank.

--hf-out DIR also saves the same tensors (same values) through torch's
HuggingFaceStorageWriter(save_distributed=True): per-rank sharded
safetensors, the input of torch's own consolidation
(torch.distributed.checkpoint._consolidate_hf_safetensors), which reads no
.distcp files.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard


def shapes(layers, h=2048, kv=256, inter=5632, vocab=32000):
    s = {"model.embed_tokens.weight": (vocab, h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                  p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                  p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                  p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
                  p + "post_attention_layernorm.weight": (h,)})
    s["model.norm.weight"] = (h,)
    s["lm_head.weight"] = (vocab, h)
    return s


def worker(rank, ws, port, out, dims, hf_out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), USE_LIBUV="0")
    dist.init_process_group("gloo", rank=rank, world_size=ws)
    mesh = init_device_mesh("cpu", (ws,))
    g = torch.Generator().manual_seed(rank)
    sd = {}
    for name, shape in shapes(**dims).items():
        rows = -(-shape[0] // ws)  # torch.chunk's split, as FSDP2 shards
        lo, hi = min(rank * rows, shape[0]), min((rank + 1) * rows, shape[0])
        local = torch.randn((hi - lo, *shape[1:]), generator=g).to(torch.bfloat16)
        sd[name] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(shape),
                                      stride=torch.empty(shape, device="meta").stride())
    dcp.save({"model": sd}, storage_writer=dcp.FileSystemWriter(out))
    if hf_out:
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        dcp.save(sd, storage_writer=HuggingFaceStorageWriter(hf_out, save_distributed=True))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=14)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--kv-dim", type=int, default=256)
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--hf-out", help="also save the tensors as torch's sharded HF safetensors here")
    a = ap.parse_args()
    dims = dict(layers=a.layers, h=a.hidden, kv=a.kv_dim, inter=a.intermediate, vocab=a.vocab)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a.world_size, port, a.out, dims, a.hf_out), nprocs=a.world_size, join=True)


if __name__ == "__main__":
    main()
