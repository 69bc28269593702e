#!/usr/bin/env python3
"""Multi-node FSDP supervised fine-tuning of Llama-3.1-8B, fed by ferry.

The seed workload (2 nodes x 8 H100, torchrun, FSDP full shard + bf16) with
three changes:

1. No dataset building in the training processes: ``dataprep`` tokenized
   Alpaca once, before torchrun, into one Arrow shard per rank (see
   train.yaml). Each rank maps its own shard; ``ferry.Loader`` replaces
   ``build_dataset`` + ``DistributedSampler`` + ``DataLoader`` and yields
   zero-copy int32 views that go to the GPU with ``ferry.to_device``. With
   ``--serve SOCKET`` (train.yaml: ``serve_socket``) the ranks get the same
   batches, in the same order, from one ``ferry-serve`` daemon per node
   instead.
2. Checkpoints are sharded DCP checkpoints (``torch.distributed.checkpoint``):
   every rank writes its own shards, no FULL_STATE_DICT gather on rank 0. The
   loader's resume point is saved with them, so a restarted job (also with
   another number of ranks) continues the same sample order.
3. After training, ``ckptmerge`` turns the last checkpoint into Hugging Face
   safetensors on the volume (train.yaml).

Runs on CPU too, for tests and laptops: ``--tiny`` (the default when CUDA is
absent) trains a tiny causal LM defined below, with gloo and DDP (torch
1.13's FSDP needs CUDA), and still saves a DCP checkpoint.

Hyperparameters come from the YAML block ``air`` materializes
(HYPERPARAMETERS_PATH); command-line flags override them.
"""

import argparse
import functools
import json
import os
import sys
import time
import types

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

try:
    import ferry
except ImportError:  # running from a ferry checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import ferry
import ferry.dcp


def load_params() -> dict:
    """Read the hyperparameters block that `air` materializes from the YAML `parameters:`."""
    path = os.environ.get("HYPERPARAMETERS_PATH")
    if path and os.path.exists(path):
        import yaml

        with open(path) as f:
            return yaml.safe_load(f) or {}
    return {}


def parse_args():
    p = load_params()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-name", default=p.get("model_name", "meta-llama/Llama-3.1-8B"))
    ap.add_argument("--data-dir", default=p.get("data_dir", "/tmp/ferry-data"),
                    help="dataprep output directory (manifest.json + rank-*.arrow)")
    ap.add_argument("--serve", metavar="SOCKET", default=p.get("serve_socket") or None,
                    help="read batches from this node's ferry-serve daemon on SOCKET instead of mapping the "
                         "shards in each rank (start `ferry-serve --data DATA_DIR --ranks ... --socket SOCKET` "
                         "on every node first; train.yaml does when serve_socket is set)")
    ap.add_argument("--checkpoint-dir", default=p.get("checkpoint_dir"),
                    help="sharded DCP checkpoints (default: OUTPUT_DIR/dcp); must be shared by all nodes")
    ap.add_argument("--output-dir", default=p.get("output_dir", "/tmp/llama-sft"))
    ap.add_argument("--batch-size", type=int, default=int(p.get("per_device_batch_size", 4)))
    ap.add_argument("--grad-accum", type=int, default=int(p.get("gradient_accumulation_steps", 2)))
    ap.add_argument("--lr", type=float, default=float(p.get("learning_rate", 2e-5)))
    ap.add_argument("--max-steps", type=int, default=int(p.get("max_steps", 100)))
    ap.add_argument("--save-every", type=int, default=int(p.get("save_every", 0)),
                    help="also checkpoint every N optimizer steps (0: only at the end)")
    ap.add_argument("--seed", type=int, default=int(p.get("seed", 0)))
    ap.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints")
    ap.add_argument("--tiny", action="store_true", default=bool(p.get("tiny", False)) or not torch.cuda.is_available(),
                    help="CPU mode: tiny model, gloo, DDP (default when there is no CUDA)")
    ap.add_argument("--vocab-size", type=int, default=int(p.get("vocab_size", 8192)),
                    help="tiny model vocabulary (ids are folded into it)")
    ap.add_argument("--metrics-file", default=p.get("metrics_file"), help="rank 0 appends one JSON line per step")
    ap.add_argument("--save-reference", default=None,
                    help="tests: rank 0 torch.saves the final full model state here")
    a = ap.parse_args()
    if a.checkpoint_dir is None:
        a.checkpoint_dir = os.path.join(a.output_dir, "dcp")
    return a


class TinyLM(nn.Module):
    """A small causal LM for CPU runs: embedding, a causal running-mean mixer,
    an MLP block and an untied head. Same call signature and loss as a HF
    causal LM (labels are unshifted; -100 is ignored)."""

    def __init__(self, vocab_size, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.mix = nn.Linear(2 * dim, dim)
        self.mlp_in = nn.Linear(dim, 4 * dim)
        self.mlp_out = nn.Linear(4 * dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, labels=None, position_ids=None):
        # Token ids are folded into the (small) vocabulary, so the model runs
        # on CPU with any tokenizer; fine for a test model, not for real use.
        V = self.head.out_features
        input_ids = input_ids % V
        if labels is not None:
            labels = torch.where(labels < 0, labels, labels % V)
        h = self.embed(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        # Causal context: the running mean of the previous tokens.
        ctx = h.cumsum(1) / torch.arange(1, h.shape[1] + 1, device=h.device).view(1, -1, 1)
        h = h + torch.tanh(self.mix(torch.cat([h, ctx], -1)))
        h = h + self.mlp_out(F.gelu(self.mlp_in(h)))
        logits = self.head(self.norm(h))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return types.SimpleNamespace(loss=loss, logits=logits)


def build_model(args, local_rank, device):
    """(wrapped model, is_fsdp, tokenizer or None)."""
    if args.tiny:
        torch.manual_seed(args.seed)
        model = TinyLM(args.vocab_size).to(device)
        return nn.parallel.DistributedDataParallel(model), False, None

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    kwargs = {}
    if ferry.read_manifest(args.data_dir).mode == "pack":
        # Packed rows: position_ids restart at every example, and only the
        # flash-attention-2 path uses them to keep examples apart (as with
        # HF's DataCollatorWithFlattening); needs the flash-attn package.
        kwargs["attn_implementation"] = "flash_attention_2"
    model = AutoModelForCausalLM.from_pretrained(args.model_name, torch_dtype=torch.bfloat16, **kwargs)
    model.config.use_cache = False  # incompatible with gradient checkpointing / FSDP training
    model.gradient_checkpointing_enable()
    # Shard each transformer block independently so no single GPU holds the full model.
    auto_wrap_policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
    model = FSDP(
        model,
        auto_wrap_policy=auto_wrap_policy,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        mixed_precision=MixedPrecision(
            param_dtype=torch.bfloat16,
            reduce_dtype=torch.bfloat16,
            buffer_dtype=torch.bfloat16,
        ),
        device_id=local_rank,
        use_orig_params=True,
    )
    return model, True, tokenizer


def write_json_atomic(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(args, model, optimizer, loader, step, rank):
    """Sharded DCP checkpoint (model; optimizer too on torch >= 2.2) + the
    loader's resume point; `latest.json` names the newest complete one."""
    name = f"step-{step:08d}"
    path = os.path.join(args.checkpoint_dir, name)
    t0 = time.time()
    with_optim = ferry.dcp.save_train_state(path, model, optimizer)
    dist.barrier()  # every rank's shards are on disk before `latest` moves
    if rank == 0:
        write_json_atomic(os.path.join(path, "ferry-train-state.json"),
                          {"step": step, "optimizer": with_optim, "loader": loader.state_dict()})
        write_json_atomic(os.path.join(args.checkpoint_dir, "latest.json"), {"checkpoint": name, "step": step})
        print(f"saved sharded checkpoint {path} in {time.time() - t0:.1f}s", flush=True)
    dist.barrier()
    return path


def try_resume(args, model, optimizer, loader, rank):
    """Load the latest checkpoint, if any; returns the optimizer step reached."""
    latest = os.path.join(args.checkpoint_dir, "latest.json")
    if args.no_resume or not os.path.exists(latest):
        return 0
    with open(latest) as f:
        name = json.load(f)["checkpoint"]
    path = os.path.join(args.checkpoint_dir, name)
    with open(os.path.join(path, "ferry-train-state.json")) as f:
        state = json.load(f)
    with_optim = ferry.dcp.load_train_state(path, model, optimizer)
    # Same global sample order, whatever the world size was when it was saved.
    loader.load_state_dict(state["loader"])
    if rank == 0:
        print(f"resumed from {path} at step {state['step']} (saved with world size "
              f"{state['loader']['world_size']}, now {dist.get_world_size()}; optimizer state "
              f"{'restored' if with_optim else 'not in this checkpoint (torch < 2.2): fresh'})", flush=True)
    return int(state["step"])


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])

    if args.tiny:
        dist.init_process_group(backend="gloo")
        device = torch.device("cpu")
    else:
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(local_rank)
        device = torch.device(f"cuda:{local_rank}")

    model, is_fsdp, tokenizer = build_model(args, local_rank, device)

    # ferry replaces build_dataset + DistributedSampler + DataLoader: rank and
    # world size come from torchrun's environment; each rank maps its shard,
    # or (--serve) gets the same batches from the node's ferry-serve daemon.
    loader = ferry.Loader(args.data_dir, args.batch_size, drop_last=True, seed=args.seed, serve=args.serve)
    if rank == 0:
        m = loader.manifest
        feed = type(loader).__name__ + (f" (ferry-serve at {args.serve})" if args.serve else " (mapped shards)")
        print(f"World size={world_size} | model={'tiny' if args.tiny else args.model_name} | data={args.data_dir} "
              f"({m.mode}, seq_len {m.seq_len}, {m.ranks} shards x {m.rows_per_rank} rows, "
              f"{loader.steps_per_epoch} batches per rank per epoch) | feed={feed}", flush=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step = try_resume(args, model, optimizer, loader, rank)

    # --- MLflow (rank 0 only) ------------------------------------------------
    use_mlflow = rank == 0 and bool(os.environ.get("MLFLOW_RUN_ID"))
    if use_mlflow:
        import mlflow

        mlflow.start_run(run_id=os.environ.get("MLFLOW_RUN_ID"))
        mlflow.log_params({"model_name": args.model_name, "lr": args.lr, "batch_size": args.batch_size,
                           "world_size": world_size, "data_dir": args.data_dir})

    # --- Training loop -------------------------------------------------------
    model.train()
    optimizer.zero_grad()
    micro_step = 0
    last_saved = step if step else None
    t_start = time.time()
    while step < args.max_steps:
        for batch in loader:  # epochs roll over by themselves (new seeded order each epoch)
            # non_blocking copy; ids/labels -> int64 on the device. A served
            # batch is valid until the next one is requested: use it in this step.
            batch = ferry.to_device(batch, device)
            out = model(**batch)
            (out.loss / args.grad_accum).backward()
            micro_step += 1
            if micro_step % args.grad_accum:
                continue
            if is_fsdp:
                model.clip_grad_norm_(1.0)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            loss = out.loss.detach()
            dist.all_reduce(loss)
            loss = loss.item() / world_size
            if rank == 0:
                print(f"step={step}/{args.max_steps} loss={loss:.4f} epoch={loader.epoch}", flush=True)
                if args.metrics_file:
                    with open(args.metrics_file, "a") as f:
                        f.write(json.dumps({"step": step, "loss": loss, "epoch": loader.epoch,
                                            "seconds": round(time.time() - t_start, 3)}) + "\n")
                if use_mlflow:
                    mlflow.log_metric("train_loss", loss, step=step)
            if args.save_every and step % args.save_every == 0:
                save_checkpoint(args, model, optimizer, loader, step, rank)
                last_saved = step
            if step >= args.max_steps:
                break

    # --- Sharded checkpoint (every rank writes its own part; no rank-0 gather) ---
    if last_saved != step:
        save_checkpoint(args, model, optimizer, loader, step, rank)
    if rank == 0 and tokenizer is not None:
        # config.json + tokenizer files for `ckptmerge --config-from`.
        meta = os.path.join(args.checkpoint_dir, "hf-meta")
        model.module.config.save_pretrained(meta)
        tokenizer.save_pretrained(meta)
    if args.save_reference and not is_fsdp and rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.module.state_dict().items()}, args.save_reference)
    if use_mlflow:
        mlflow.end_run()

    loader.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
