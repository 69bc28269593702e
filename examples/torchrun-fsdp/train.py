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

Runs on CPU too, for tests and laptops (never chosen by itself: without
CUDA and without ``--cpu`` or ``--tiny`` the script stops):

- ``--cpu``: the seed's code path on CPU with gloo: ``from_pretrained``
  of ``--model-name`` (a local directory with a small model, e.g. a
  random-init Llama sized for the Llama-3.1 tokenizer), the seed's FSDP1
  wrapping, the DCP checkpoints, MLflow, ckptmerge.
- ``--tiny``: a tiny causal LM defined below, with gloo and DDP (no
  transformers needed); still saves a DCP checkpoint.

Hyperparameters come from the YAML block ``air`` materializes
(HYPERPARAMETERS_PATH); command-line flags override them.
"""

import argparse
import functools
import importlib.util
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


def parse_args(argv=None):
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
    ap.add_argument("--resume", action="store_true", default=bool(p.get("resume", False)),
                    help="continue from CHECKPOINT_DIR/latest.json (a retry of the same run, same FERRY_RUN_ID or "
                         "MLFLOW_RUN_ID, resumes without it); a new job stops on an old run's checkpoint without it")
    ap.add_argument("--labels", choices=["mask-pad", "copy", "mask-prompt", "assistant", "last-assistant",
                                         "generation", "all"],
                    default=p.get("labels") or {"alpaca": "mask-pad", "chat": "assistant"}.get(p.get("format")),
                    help="the objective DATA_DIR must have been made with (dataprep --labels; default: the "
                         "format parameter's, mask-pad for alpaca, assistant for chat); copy = the seed's "
                         "labels = input_ids, pads included; assistant = loss on the assistant's replies only")
    ap.add_argument("--max-seq-len", type=int, default=p.get("max_seq_len"),
                    help="the seq_len DATA_DIR must have been made with")
    ap.add_argument("--tokenizer-dir", default=p.get("tokenizer_dir"),
                    help="tokenizer.json DATA_DIR must have been made with (checked by sha256)")
    ap.add_argument("--check-data", action="store_true",
                    help="only check DATA_DIR against --tokenizer-dir, --max-seq-len and --labels, then exit")
    ap.add_argument("--cpu", action="store_true", default=bool(p.get("cpu", False)),
                    help="CPU mode with the real model path: from_pretrained(--model-name, e.g. a local tiny "
                         "model dir), gloo, the seed's FSDP (tests, laptops; never chosen by itself)")
    ap.add_argument("--mixed-precision", choices=["auto", "bf16", "fp32"],
                    default=p.get("mixed_precision", "auto"),
                    help="FSDP MixedPrecision: bf16 (the seed's), fp32 (none); auto = bf16 on CUDA, on CPU only "
                         "when it has native bf16 (avx512_bf16 / amx_bf16)")
    ap.add_argument("--tiny", action="store_true", default=bool(p.get("tiny", False)),
                    help="CPU mode: tiny model, gloo, DDP (tests; never chosen by itself)")
    ap.add_argument("--vocab-size", type=int, default=int(p.get("vocab_size", 8192)),
                    help="tiny model vocabulary (ids are folded into it)")
    ap.add_argument("--metrics-file", default=p.get("metrics_file"), help="rank 0 appends one JSON line per step")
    ap.add_argument("--save-reference", default=None,
                    help="tests: rank 0 torch.saves the final full model state here (FSDP: gathered as the "
                         "seed gathers it, FULL_STATE_DICT on rank 0)")
    ap.add_argument("--sample-log", default=None, metavar="DIR",
                    help="tests: every rank appends one JSON line per micro-batch to DIR/rank-R.jsonl: the "
                         "optimizer step it belongs to and the source record index of each row")
    a = ap.parse_args(argv)
    if a.tiny and a.cpu:
        ap.error("--tiny and --cpu exclude each other")
    if not (a.tiny or a.cpu) and not a.check_data and not torch.cuda.is_available():
        ap.error("CUDA is not available on this machine: check the GPU driver, or pass --tiny for the CPU "
                 "test mode (a tiny model, not the real one), or --cpu with a small --model-name")
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

    def forward(self, input_ids, attention_mask=None, labels=None, position_ids=None, num_items_in_batch=None,
                **kwargs):
        # Token ids are folded into the (small) vocabulary, so the model runs
        # on CPU with any tokenizer; fine for a test model, not for real use.
        # (Pack mode's other keys, cu_seq_lens_q etc., are ignored: this
        # stand-in does not keep packed examples apart.)
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
            # HF's causal-LM loss: with ferry's num_items_in_batch, the mean
            # over all loss tokens of the optimizer step (all ranks).
            loss = ferry.causal_lm_loss(logits, labels, num_items_in_batch)
        return types.SimpleNamespace(loss=loss, logits=logits)


def local_model(name):
    """A directory (or s3:// prefix) for ferry.load_pretrained: a hub name is
    downloaded into the Hugging Face cache first, as from_pretrained does."""
    if name.startswith("s3://") or os.path.isdir(name):
        return name
    from huggingface_hub import snapshot_download

    return snapshot_download(name, allow_patterns=["*.safetensors", "*.json"])


def build_model(args, local_rank, device):
    """(wrapped model, is_fsdp, tokenizer or None)."""
    if args.tiny:
        if ferry.read_manifest(args.data_dir).mode == "pack":
            raise SystemExit(f"--tiny: {args.data_dir} is packed, and the stand-in model does not keep packed "
                             "examples apart; use a pad-mode data dir or a real model (--model-name)")
        torch.manual_seed(args.seed)
        model = TinyLM(args.vocab_size).to(device)
        return nn.parallel.DistributedDataParallel(model), False, None

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    on_cpu = device.type == "cpu"
    bf16 = mixed_precision_bf16(args.mixed_precision, on_cpu)
    args.precision = "bf16 mixed precision" if bf16 else "fp32"
    kwargs = {}
    pack = ferry.read_manifest(args.data_dir).mode == "pack"
    if pack:
        # Packed rows: ferry's batches keep the examples apart on every
        # attention implementation (ferry.check_packing below says so or
        # refuses); flash-attention-2 is the fastest where flash-attn is
        # installed, sdpa otherwise.
        fa2 = not on_cpu and importlib.util.find_spec("flash_attn") is not None
        kwargs["attn_implementation"] = "flash_attention_2" if fa2 else "sdpa"
    # The seed loads bf16 weights; without bf16 (a CPU without native bf16)
    # the weights stay fp32. ferry builds the model on the meta device, lets
    # FSDP shard it, then loads each rank's shard only (ferry.load_pretrained
    # below; through the node's ferry-serve with --serve): the seed read the
    # whole model on every rank. FSDP1 materialises a meta model module by
    # module, which unties tied weights, so a tied model is built on CPU.
    dtype = torch.bfloat16 if bf16 else torch.float32
    config = AutoConfig.from_pretrained(args.model_name)
    meta = not config.tie_word_embeddings
    with torch.device("meta" if meta else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    if pack:
        print(ferry.check_packing(model), flush=True)
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
        ) if bf16 else None,
        device_id=device if on_cpu else local_rank,
        use_orig_params=True,
        param_init_fn=(lambda m: m.to_empty(device=device, recurse=False)) if meta else None,
    )
    ferry.load_pretrained(model, local_model(args.model_name), serve=args.serve, dtype=dtype)
    return model, True, tokenizer


def cpu_has_native_bf16():
    """Whether this CPU computes in bf16 natively (AVX512-BF16 or AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def mixed_precision_bf16(choice, on_cpu):
    """bf16 mixed precision (the seed's) or none (fp32). On CPU, gloo runs
    FSDP's bf16 all-gathers and reduce-scatters, but a CPU without native
    bf16 emulates every bf16 matmul: about 10x slower than fp32 for the tiny
    test model (measured on a 2-core AVX2 machine), so "auto" keeps fp32
    there."""
    if choice == "auto":
        return not on_cpu or cpu_has_native_bf16()
    return choice == "bf16"


def check_data_dir(args):
    """Stop with a clear message when DATA_DIR was made for another tokenizer,
    seq_len or labels policy (a reused data_dir of an earlier job)."""
    bad = ferry.data_dir_mismatches(args.data_dir, args.tokenizer_dir, args.max_seq_len, args.labels)
    if bad:
        raise SystemExit(f"{args.data_dir} was made for other data: {'; '.join(bad)}. Point data_dir at a new "
                         "directory (dataprep makes it), or delete this one.")


def save_hf_meta(meta, config, tokenizer, generation_config=None):
    """config.json, generation_config.json and the tokenizer files for
    ``ckptmerge --config-from``; the tokenizer with pad = eos, as the seed sets
    it before its save_pretrained(output_dir)."""
    from transformers import GenerationConfig

    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config.save_pretrained(meta)
    tokenizer.save_pretrained(meta)
    (generation_config or GenerationConfig.from_model_config(config)).save_pretrained(meta)


def run_id():
    """This run's identity, kept in latest.json: a retry of the same job (same
    id) resumes by itself, another job does not."""
    return os.environ.get("FERRY_RUN_ID") or os.environ.get("MLFLOW_RUN_ID") or None


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
        write_json_atomic(os.path.join(args.checkpoint_dir, "latest.json"),
                          {"checkpoint": name, "step": step, "run_id": run_id()})
        print(f"saved sharded checkpoint {path} in {time.time() - t0:.1f}s", flush=True)
    dist.barrier()
    return path


def try_resume(args, model, optimizer, loader, rank):
    """Load the latest checkpoint, if any; returns the optimizer step reached."""
    latest = os.path.join(args.checkpoint_dir, "latest.json")
    if not os.path.exists(latest):
        return 0
    with open(latest) as f:
        last = json.load(f)
    name = last["checkpoint"]
    same_run = run_id() is not None and last.get("run_id") == run_id()
    if not (args.resume or same_run):
        raise SystemExit(f"{latest}: {args.checkpoint_dir} holds the checkpoint of an earlier run (step "
                         f"{last.get('step')}). Pass --resume (parameter resume: true) to continue it, or use a "
                         "new checkpoint_dir for a new run.")
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


def log_samples(f, loader, block, batch, step):
    """One JSON line: the optimizer step this micro-batch belongs to, and for
    each row its source record (dataprep's segments; pad mode: one per row)
    and a crc32 of its input_ids (what the model got)."""
    import zlib

    shard, row, rows = block
    sf = loader.shards.shard(shard)
    ids = batch["input_ids"].numpy()
    f.write(json.dumps({"step": step, "epoch": loader.epoch,
                        "samples": [[s for s, _, _ in sf.segments(r)] for r in range(row, row + rows)],
                        "crc": [zlib.crc32(ids[i].tobytes()) for i in range(rows)]}) + "\n")
    f.flush()


def save_reference(path, model, is_fsdp, rank):
    """The final full model state on rank 0, for tests (FSDP: gathered the
    way the seed gathers it for its save_pretrained)."""
    if is_fsdp:
        from torch.distributed.fsdp import FullStateDictConfig, StateDictType
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                  FullStateDictConfig(offload_to_cpu=True, rank0_only=True)):
            state = model.state_dict()
    else:
        state = model.module.state_dict()
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in state.items()}, path)


def main():
    args = parse_args()
    if args.check_data:
        check_data_dir(args)
        print(f"{args.data_dir}: matches", flush=True)
        return
    check_data_dir(args)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])

    if args.tiny or args.cpu:
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
    # grad_accum: every batch carries num_items_in_batch for this optimizer
    # step, so the loss below is the mean over all its tokens on all ranks.
    # A mixture (dataprep --recipe): batches carry source_ids (from the shard or
    # the daemon), to log the loss per source; the manifest is read where the
    # data dir is local (with --serve it may be an s3:// prefix only the daemon reads).
    mixture = os.path.isdir(args.data_dir) and bool(ferry.read_manifest(args.data_dir).sources)
    loader = ferry.Loader(args.data_dir, args.batch_size, drop_last=True, seed=args.seed, serve=args.serve,
                          grad_accum=args.grad_accum, **({"sources": True} if mixture else {}))
    n_src = len(loader.source_names) if mixture else 0
    src_sums, src_tokens = torch.zeros(n_src, device=device), torch.zeros(n_src, device=device)
    if rank == 0:
        m = loader.manifest
        feed = f"ServeLoader (ferry-serve at {args.serve})" if args.serve else "Loader (mapped shards)"
        print(f"World size={world_size} | model={'tiny' if args.tiny else args.model_name} | data={args.data_dir} "
              f"({m.mode}, seq_len {m.seq_len}, {m.ranks} shards x {m.rows_per_rank} rows, "
              f"{loader.steps_per_epoch} batches per rank per epoch) | feed={feed} | labels={m.labels}"
              f"{' (seed parity: loss on the pads too)' if m.labels == 'copy' else ''}"
              f"{f' | FSDP {args.precision}' if is_fsdp else ''}", flush=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step = try_resume(args, model, optimizer, loader, rank)

    # --- MLflow (rank 0 only) ------------------------------------------------
    use_mlflow = rank == 0 and bool(os.environ.get("MLFLOW_RUN_ID"))
    if use_mlflow:
        import mlflow

        mlflow.start_run(run_id=os.environ.get("MLFLOW_RUN_ID"))
        mlflow.log_params({"model_name": args.model_name, "lr": args.lr, "batch_size": args.batch_size,
                           "world_size": world_size, "data_dir": args.data_dir, "labels": loader.manifest.labels})

    sample_log = None
    if args.sample_log:
        os.makedirs(args.sample_log, exist_ok=True)
        sample_log = open(os.path.join(args.sample_log, f"rank-{rank}.jsonl"), "a")

    # --- Training loop -------------------------------------------------------
    model.train()
    optimizer.zero_grad()
    micro_step = 0
    last_saved = step if step else None
    t_start = time.time()
    while step < args.max_steps:
        # This iteration's batches, (shard, first row, rows) each: for --sample-log.
        schedule = loader.schedule() if sample_log else None
        for j, batch in enumerate(loader):  # epochs roll over by themselves (new seeded order each epoch)
            if sample_log:
                log_samples(sample_log, loader, schedule[j], batch, step + 1)
            # non_blocking copy; ids/labels -> int64 on the device. A served
            # batch is valid until the next one is requested: use it in this step.
            src = batch.pop("source_ids", None)
            batch = ferry.to_device(batch, device)
            if src is None:
                out = model(**batch)
            else:  # the same loss, split by source (docs/mixtures.md)
                labels, items = batch.pop("labels"), batch.pop("num_items_in_batch", None)
                out = model(**batch)
                sl = ferry.loss_by_source(out.logits, labels, src, n_src, num_items_in_batch=items)
                out.loss = sl.loss
                src_sums += sl.sums
                src_tokens += sl.tokens.to(src_tokens.device)
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
            # one all_reduce: the loss and, for a mixture, the per-source sums and tokens
            vec = torch.cat([out.loss.detach().float().view(1), src_sums, src_tokens])
            dist.all_reduce(vec)
            loss = vec[0].item() / world_size
            by_source = ferry.source_means(vec[1:1 + n_src], vec[1 + n_src:], loader.source_names) if n_src else {}
            src_sums.zero_()
            src_tokens.zero_()
            if rank == 0:
                per = "".join(f" loss/{k}={v:.4f}" for k, v in by_source.items())
                print(f"step={step}/{args.max_steps} loss={loss:.4f}{per} epoch={loader.epoch}", flush=True)
                if args.metrics_file:
                    with open(args.metrics_file, "a") as f:
                        rec = {"step": step, "loss": loss, "epoch": loader.epoch}
                        if n_src:
                            rec["loss_by_source"] = by_source
                        rec["seconds"] = round(time.time() - t_start, 3)
                        f.write(json.dumps(rec) + "\n")
                if use_mlflow:
                    mlflow.log_metric("train_loss", loss, step=step)
                    for name, v in by_source.items():
                        mlflow.log_metric(f"loss/{name}", v, step=step)
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
        save_hf_meta(meta, model.module.config, tokenizer, model.module.generation_config)
    if args.save_reference:
        save_reference(args.save_reference, model, is_fsdp, rank)
    if sample_log:
        sample_log.close()
    if use_mlflow:
        mlflow.end_run()

    loader.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
