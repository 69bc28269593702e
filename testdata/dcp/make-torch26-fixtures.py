#!/usr/bin/env python3
"""make-torch26-fixtures.py -- REAL torch >= 2.6 DCP checkpoints written by
FSDP2 (fully_shard) and FSDP2 + tensor parallel, on CPU with gloo, with
torch's own consolidation as ground truth.

Usage (a Python with torch >= 2.6 and safetensors, e.g. Debian trixie's
python3-torch 2.6 and python3-safetensors):
  python3 make-torch26-fixtures.py OUTDIR

Fixtures (one tiny HF-Llama-shaped model: vocab 37, hidden 20, 6-wide k/v
projections, MLP 44, 2 layers, untied lm_head; seed 0):
  torch26-fsdp2-bf16-ws4      bf16 parameters, fully_shard per layer and at
                              the root on a 4-rank mesh (uneven Shard(0)
                              chunks; k_proj/v_proj have 6 rows, so rank 3
                              holds an empty chunk), one AdamW step (on
                              gradients set from the sharded parameters:
                              FSDP2's forward needs an accelerator stream
                              in torch 2.6), then
                              dcp.save({"model": ..., "optim": ...}) with
                              get_state_dict: DTensor chunks, optimizer
                              exp_avg/exp_avg_sq DTensors, 0-dim "step"
                              tensors, param_groups as bytes items
  torch26-fsdp2-fp32-ws3-t2   the same in fp32 on 3 ranks, saved with
                              FileSystemWriter(thread_count=2): two .distcp
                              files per rank
  torch26-fsdp2tp-bf16-2x2    bf16, a 2x2 ("dp", "tp") mesh: attention and
                              MLP projections ColwiseParallel /
                              RowwiseParallel on "tp", then fully_shard on
                              "dp": chunks sharded in both dimensions
                              (model only, no training step; k/v are
                              8 wide, as FSDP + TP needs even splits)

Ground truth per directory: torch's dcp_to_torch_save consolidates the
checkpoint into one torch.save file; its "model" tensors are written with
safetensors.torch.save_file (metadata {"format": "pt"}) as
expected.safetensors, so ckptmerge's output must be byte-identical; and
expected.json lists every tensor (kind "tensor": model tensors under their
names; kind "optimizer": optimizer tensors under their DCP keys
"optim.state.<fqn>.<name>") with dtype, shape and SHA-256 of its bytes.
"""

import hashlib
import json
import math
import os
import shutil
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict
from torch.distributed.device_mesh import init_device_mesh

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import fully_shard

VOCAB, HIDDEN, KV, INTER, LAYERS = 37, 20, 6, 44, 2


class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n) + 0.01 * torch.randn(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV, bias=False)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, h):
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        a = torch.softmax(q[..., :KV] @ k.transpose(-1, -2) / math.sqrt(KV), -1) @ v
        return self.o_proj(torch.cat([a, q[..., KV:]], -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, h):
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attention()
        self.mlp = MLP()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.post_attention_layernorm = RMSNorm(HIDDEN)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


def worker(rank, ws, port, kind, out):
    global KV
    if kind.startswith("torch26-fsdp2tp"):
        KV = 8  # FSDP + TP needs dimensions that split evenly over both mesh dimensions
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), USE_LIBUV="0")
    dist.init_process_group("gloo", rank=rank, world_size=ws)
    torch.manual_seed(0)
    dtype = torch.float32 if "fp32" in kind else torch.bfloat16
    model = Tiny().to(dtype)
    if kind.startswith("torch26-fsdp2tp"):
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for layer in model.model.layers:
            parallelize_module(layer, mesh["tp"], {
                "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel()})
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        state = {"model": get_model_state_dict(model)}
    else:
        mesh = init_device_mesh("cpu", (ws,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        # FSDP2's forward needs an accelerator stream in torch 2.6, so the
        # step takes gradients made from the sharded parameters themselves
        # (DTensors with the parameters' placements, as after a backward)
        for p in model.parameters():
            p.grad = p.detach() * 0.5 + 0.01
        opt.step()
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
    threads = 2 if kind.endswith("-t2") else 1
    dcp.save(state, storage_writer=dcp.FileSystemWriter(out, thread_count=threads))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ST_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64"}


def truth(out):
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "full.pt")
        dcp_to_torch_save(out, pt)
        full = torch.load(pt, weights_only=False)
    model = {k: v.contiguous() for k, v in full["model"].items()}
    save_file(model, os.path.join(out, "expected.safetensors"), metadata={"format": "pt"})
    entries = []

    def add(key, kind, t):
        b = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dim() else t.reshape(1).view(torch.uint8).numpy().tobytes()
        entries.append({"key": key, "kind": kind, "dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "sha256": hashlib.sha256(b).hexdigest()})

    for k, v in model.items():
        add(k, "tensor", v)
    for fqn, st in full.get("optim", {}).get("state", {}).items():
        for name, v in st.items():
            if isinstance(v, torch.Tensor):
                add(f"optim.state.{fqn}.{name}", "optimizer", v)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"note": "made by make-torch26-fixtures.py with torch " + torch.__version__
                   + "; model tensors under their names, optimizer tensors under their DCP keys; "
                   "expected.safetensors = safetensors.torch.save_file of dcp_to_torch_save's model",
                   "entries": entries}, f, indent=1)
        f.write("\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    for kind, ws in [("torch26-fsdp2-bf16-ws4", 4), ("torch26-fsdp2-fp32-ws3-t2", 3), ("torch26-fsdp2tp-bf16-2x2", 4)]:
        out = os.path.join(root, kind)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        mp.spawn(worker, args=(ws, free_port(), kind, out), nprocs=ws, join=True)
        truth(out)
        print(kind, sorted(os.listdir(out)))


if __name__ == "__main__":
    main()
