#!/usr/bin/env python3
"""Distributed fine-tuning with Ray Train on a single 8x H100 node, fed by ferry.

The seed workload (Qwen2.5-3B, Ray Train TorchTrainer, one worker per GPU)
with three changes:

1. The driver runs ``dataprep`` once before ``trainer.fit()``: Alpaca is
   tokenized into one Arrow shard per worker. Workers no longer load and
   tokenize the dataset; ``ferry.Loader`` (rank and world size from Ray
   Train's context) replaces ``DataLoader`` + ``prepare_data_loader``'s
   DistributedSampler and yields zero-copy views of the worker's shard.
2. The model is wrapped with FSDP (``prepare_model(parallel_strategy="fsdp")``)
   and saved as a sharded DCP checkpoint: every worker writes its own
   shards, nothing is gathered. The loader's resume point is saved with it
   and the checkpoint is reported to Ray Train.
3. After ``fit()``, the driver runs ``ckptmerge``: last checkpoint -> HF
   safetensors in ``--output-dir`` (a volume).

``--serve SOCKET``: the workers get the same batches, in the same order,
from a ``ferry-serve`` daemon on SOCKET instead of mapping the shards
themselves; the driver starts it after dataprep (one node; on several nodes
start one per node, ``ferry-serve --data DIR --ranks ... --socket SOCKET``,
before ``fit()``).

``--format chat``: conversations (records with ``messages`` or ShareGPT
``conversations``, e.g. HuggingFaceH4/ultrachat_200k) instead of Alpaca
records, rendered with the tokenizer's chat template; ``--labels`` then
defaults to ``assistant`` (loss on the assistant's replies and their
end-of-turn token only; docs/chat.md). ``--chat-template`` and ``--date``
pass on to dataprep.

``--model``: the Hugging Face model, a hub name (default Qwen/Qwen2.5-3B) or
a local directory (from save_pretrained).

CPU mode for tests (``--cpu``): gloo; a tiny model defined below with DDP, or,
with ``--model``, that model in float32 sharded with FSDP1 as on the GPUs
(Ray's ``prepare_model`` refuses FSDP without CUDA, so the CPU path wraps it
itself). ``--worker`` runs train_func directly under torchrun, without Ray
(for machines without Ray installed).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import types

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import ferry
except ImportError:  # running from a ferry checkout
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import ferry
import ferry.dcp

MODEL_NAME = "Qwen/Qwen2.5-3B"
DATASET_NAME = "tatsu-lab/alpaca"
MAX_SEQ_LEN = 1024


class TinyLM(torch.nn.Module):
    """CPU stand-in for the causal LM: embedding, causal running-mean mixer,
    MLP, untied head; HF-style call and shifted loss (-100 ignored)."""

    def __init__(self, vocab_size, dim=16):
        super().__init__()
        nn = torch.nn
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
        V = self.head.out_features
        input_ids = input_ids % V
        if labels is not None:
            labels = torch.where(labels < 0, labels, labels % V)
        F = torch.nn.functional
        h = self.embed(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        ctx = h.cumsum(1) / torch.arange(1, h.shape[1] + 1, device=h.device).view(1, -1, 1)
        h = h + torch.tanh(self.mix(torch.cat([h, ctx], -1)))
        h = h + self.mlp_out(F.gelu(self.mlp_in(h)))
        logits = self.head(self.norm(h))
        loss = None
        if labels is not None:
            # HF's causal-LM loss; num_items_in_batch makes it the step's token mean.
            loss = ferry.causal_lm_loss(logits, labels, num_items_in_batch)
        return types.SimpleNamespace(loss=loss, logits=logits)


def _ray_train():
    try:
        import ray.train

        ray.train.get_context().get_world_size()
        return ray.train
    except Exception:
        return None


def report(metrics, checkpoint_dir=None):
    """ray.train.report inside a Ray Train worker; a print otherwise."""
    rt = _ray_train()
    if rt is not None:
        # The checkpoint directory is shared by all workers (each wrote its
        # own shards into it): rank 0 alone hands it to Ray.
        ckpt = None
        if checkpoint_dir and rt.get_context().get_world_rank() == 0:
            ckpt = rt.Checkpoint.from_directory(checkpoint_dir)
        rt.report(metrics, checkpoint=ckpt)
    elif int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(metrics), flush=True)


def clip_grad_norm(model, max_norm):
    """Clip by the global gradient norm and return it. Under FSDP1 every rank
    holds only its shard of the gradients, so torch.nn.utils.clip_grad_norm_
    would clip each rank by the norm of its own shard; FSDP's own method
    all-reduces the norm first. DDP (full gradients on every rank) and FSDP2
    (DTensor gradients, whose norm torch reduces over the mesh) go through
    torch.nn.utils.clip_grad_norm_."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(model, FSDP):
        return model.clip_grad_norm_(max_norm)
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def fsdp_cpu(model, param_init_fn=None):
    """FSDP1 on CPU (gloo): the GPU path's setup, FULL_SHARD with each decoder
    layer its own unit and use_orig_params, in float32 (no mixed precision)."""
    import functools

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    layer_cls = {type(m) for m in model.modules() if type(m).__name__.endswith("DecoderLayer")}
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer_cls)
    return FSDP(model, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                use_orig_params=True, device_id=torch.device("cpu"), param_init_fn=param_init_fn)


def local_model(name):
    """A directory (or s3:// prefix) for ferry.load_pretrained: a hub name is
    downloaded into the Hugging Face cache first, as from_pretrained does."""
    if name.startswith("s3://") or os.path.isdir(name):
        return name
    from huggingface_hub import snapshot_download

    return snapshot_download(name, allow_patterns=["*.safetensors", "*.json"])


def build_model(config, device):
    """(model, is_fsdp)."""
    if config["cpu"] and not config.get("model"):
        if ferry.read_manifest(config["data_dir"]).mode == "pack":
            raise SystemExit(f"--cpu without --model: {config['data_dir']} is packed, and the stand-in model does "
                             "not keep packed examples apart; use --mode pad or a real model (--model)")
        torch.manual_seed(config.get("seed", 0))
        model = TinyLM(config.get("vocab_size", 8192)).to(device)
        return torch.nn.parallel.DistributedDataParallel(model), False
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = torch.float32 if config["cpu"] else torch.bfloat16
    # The model is built from its config, sharded by FSDP, then each worker
    # loads only its shard (ferry.load_pretrained; with --serve through the
    # node's ferry-serve, which reads each file once for the node's
    # workers). The seed read the whole model in every worker. FSDP1
    # materialises a meta model module by module, which unties tied weights
    # (Qwen2.5-3B's lm_head), so a tied model is built on CPU.
    path = local_model(config.get("model") or MODEL_NAME)
    cfg = AutoConfig.from_pretrained(path)
    meta = not cfg.tie_word_embeddings
    with torch.device("meta" if meta else "cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.config.use_cache = False
    if ferry.read_manifest(config["data_dir"]).mode == "pack":
        print(ferry.check_packing(model), flush=True)  # refuses a model that would mix packed examples
    init = (lambda m: m.to_empty(device=device, recurse=False)) if meta else None
    if config["cpu"]:
        model = fsdp_cpu(model, init)
    else:
        from ray.train.torch import prepare_model

        # FSDP instead of the seed's DDP, so the checkpoint is sharded.
        model = prepare_model(model, parallel_strategy="fsdp",
                              parallel_strategy_kwargs={"use_orig_params": True, "param_init_fn": init})
    ferry.load_pretrained(model, path, serve=config.get("serve"), dtype=dtype)
    return model, True


def save_checkpoint(config, model, optimizer, loader, step):
    path = os.path.join(config["checkpoint_dir"], f"step-{step:08d}")
    # Every rank writes its own shards (optimizer too on torch >= 2.2); no gather.
    ferry.dcp.save_train_state(path, model, optimizer)
    dist.barrier()
    if dist.get_rank() == 0:
        state = {"step": step, "loader": loader.state_dict()}
        with open(os.path.join(path, "ferry-train-state.json"), "w") as f:
            json.dump(state, f)
        tmp = os.path.join(config["checkpoint_dir"], "latest.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"checkpoint": os.path.basename(path), "step": step}, f)
        os.replace(tmp, os.path.join(config["checkpoint_dir"], "latest.json"))
    dist.barrier()
    return path


def resume(model, optimizer, loader, rank):
    """After a worker failure Ray Train restarts train_func (FailureConfig);
    ray.train.get_checkpoint() is then the last reported checkpoint: model,
    optimizer and the loader's position. Returns the step reached (0: fresh)."""
    rt = _ray_train()
    ckpt = rt.get_checkpoint() if rt is not None else None
    if ckpt is None:
        return 0
    with ckpt.as_directory() as path:
        with open(os.path.join(path, "ferry-train-state.json")) as f:
            state = json.load(f)
        ferry.dcp.load_train_state(path, model, optimizer)
    loader.load_state_dict(state["loader"])
    if rank == 0:
        print(f"resumed from {path} at step {state['step']}", flush=True)
    return int(state["step"])


def train_func(config: dict):
    """Runs on every Ray Train worker (one per GPU), or under torchrun with --worker."""
    rt = _ray_train()
    if rt is None and not dist.is_initialized():
        dist.init_process_group(backend="gloo" if config["cpu"] else "nccl")
    rank = dist.get_rank()
    if config["cpu"]:
        device = torch.device("cpu")
    else:
        from ray.train.torch import get_device

        device = get_device()

    model, _ = build_model(config, device)

    # ferry replaces build_dataset + DataLoader + prepare_data_loader: the
    # worker's rank and the world size come from Ray Train's context.
    # With config["serve"] the batches come from the node's ferry-serve.
    loader = ferry.Loader(config["data_dir"], config["batch_size"], drop_last=True, seed=config.get("seed", 0),
                          serve=config.get("serve"))
    labels = loader.manifest.labels  # the objective: "copy" trains on the pads, as the seed did
    if rank == 0:
        feed = f"ferry-serve at {config['serve']}" if config.get("serve") else "direct (mapped shards)"
        kind = "ServeLoader" if config.get("serve") else "Loader"
        print(f"ferry feed: {kind}, {feed}, {loader.steps_per_epoch} batches per worker per epoch, "
              f"labels={labels}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    step = resume(model, optimizer, loader, rank)

    use_mlflow = rank == 0 and bool(os.environ.get("MLFLOW_RUN_ID"))
    if use_mlflow:
        import mlflow

        mlflow.start_run(run_id=os.environ.get("MLFLOW_RUN_ID"))
        mlflow.log_params({"model": config.get("model") or MODEL_NAME, "lr": config["lr"], "batch_size": config["batch_size"],
                           "labels": labels})

    model.train()
    loss = None
    while step < config["max_steps"]:
        for batch in loader:
            batch = ferry.to_device(batch, device)  # ids/labels -> int64 on the device
            out = model(**batch)  # pack mode's keys and num_items_in_batch (the step's token mean) included
            out.loss.backward()
            clip_grad_norm(model, 1.0)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            loss = out.loss.detach()
            dist.all_reduce(loss)
            loss = loss.item() / dist.get_world_size()
            if use_mlflow:
                mlflow.log_metric("train_loss", loss, step=step)
            if step >= config["max_steps"]:
                break  # the last step is reported with the checkpoint
            ckpt = None
            if config.get("save_every") and step % config["save_every"] == 0:
                ckpt = save_checkpoint(config, model, optimizer, loader, step)  # a restart resumes here
            report({"loss": loss, "step": step}, checkpoint_dir=ckpt)

    path = save_checkpoint(config, model, optimizer, loader, step)
    loader.close()
    report({"loss": loss, "step": step}, checkpoint_dir=path)
    if use_mlflow:
        mlflow.end_run()


def run_dataprep(args, ranks):
    """Tokenize once, before training. A complete output made with the same
    tokenizer, seq_len and labels (and, for chat data, chat template and
    date) is reused; one made otherwise is refused (or, with --rebuild-data,
    made again)."""
    force = False
    chat = dict(format=getattr(args, "format", "alpaca"), chat_template=getattr(args, "chat_template", None),
                date=getattr(args, "date", None))
    if os.path.exists(os.path.join(args.data_dir, "manifest.json")):
        template = None
        if chat["chat_template"]:
            with open(chat["chat_template"], encoding="utf-8") as f:
                template = f.read()
        bad = ferry.data_dir_mismatches(args.data_dir, args.tokenizer, args.seq_len, args.labels, args.mode,
                                        chat_template=template, date=chat["date"])
        records = ferry.read_manifest(args.data_dir).stats.get("records_read")
        if getattr(args, "max_samples", 0) and records != args.max_samples:
            bad.append(f"{records} records != --max-samples {args.max_samples}")
        if not bad:
            print(f"dataprep: {args.data_dir} is complete and matches; not re-run", flush=True)
            return
        if not args.rebuild_data:
            raise SystemExit(f"dataprep: {args.data_dir} was made for other data: {'; '.join(bad)}. "
                             "Pass another --data-dir, or --rebuild-data to replace it.")
        print(f"dataprep: {args.data_dir} is stale ({'; '.join(bad)}): rebuilding", flush=True)
        force = True
    inputs = [args.input] if isinstance(args.input, str) else list(args.input or [])
    if not inputs or not all(inputs):
        raise SystemExit("dataprep: --input is empty (did the dataset download fail?)")
    cmd = [args.dataprep] + [a for f in inputs for a in ("--input", f)]
    if getattr(args, "max_samples", 0):
        cmd += ["--max-records", str(args.max_samples)]  # the seed's split="train[:N]"
    cmd += ["--tokenizer", args.tokenizer, "--seq-len", str(args.seq_len), "--format", chat["format"],
            "--labels", args.labels, "--mode", args.mode, "--ranks", str(ranks), "--out", args.data_dir]
    if chat["chat_template"]:
        cmd += ["--chat-template", chat["chat_template"]]
    if chat["date"]:
        cmd += ["--date", chat["date"]]
    cmd += ["--force"] if force else []
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def start_ferry_serve(args):
    """ferry-serve for this node's workers; returns the process once it
    accepts connections."""
    if os.path.exists(args.serve):
        os.remove(args.serve)  # a stale socket of an earlier run
    cmd = [args.ferry_serve, "--data", args.data_dir, "--socket", args.serve]
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 600
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"ferry-serve exited {proc.returncode} before listening on {args.serve}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.connect(args.serve)
            return proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"ferry-serve did not listen on {args.serve} within 10 minutes")
            time.sleep(0.1)


def write_hf_meta(src, dst):
    """config.json, generation_config.json and the tokenizer files for
    ``ckptmerge --config-from``, the tokenizer with pad = eos as the seed sets
    it, so that the output loads like the seed's save_pretrained(output_dir)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    os.makedirs(dst, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(src)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.save_pretrained(dst)
    cfg = AutoConfig.from_pretrained(src)
    cfg.save_pretrained(dst)
    try:
        gen = GenerationConfig.from_pretrained(src)
    except OSError:  # the repo has none: the one from_pretrained would derive
        gen = GenerationConfig.from_model_config(cfg)
    gen.save_pretrained(dst)
    return dst


def run_ckptmerge(args):
    with open(os.path.join(args.checkpoint_dir, "latest.json")) as f:
        last = json.load(f)["checkpoint"]
    cmd = [args.ckptmerge, "--force"]  # a retried job replaces its own output
    if args.config_from:
        cmd += ["--config-from", write_hf_meta(args.config_from, os.path.join(args.checkpoint_dir, "hf-meta"))]
    cmd += [os.path.join(args.checkpoint_dir, last), args.output_dir]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


ALPACA_LABELS = ["mask-pad", "copy", "mask-prompt"]
CHAT_LABELS = ["assistant", "last-assistant", "generation", "all"]

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", nargs="+", default=["/tmp/ferry-ds/alpaca.parquet"],
                    help="Alpaca json/jsonl/parquet files (or s3://), or globs: every file of the split, read in "
                         "order (e.g. '/tmp/ferry-ds/data/train-*.parquet')")
    ap.add_argument("--tokenizer", default="/tmp/ferry-tok", help="directory with tokenizer.json")
    ap.add_argument("--model", default=None,
                    help=f"Hugging Face model: hub name or local directory (default {MODEL_NAME}; "
                         "with --cpu: the tiny test model unless given)")
    ap.add_argument("--seq-len", type=int, default=MAX_SEQ_LEN)
    ap.add_argument("--format", choices=["alpaca", "chat"], default="alpaca",
                    help="the input: alpaca (instruction/input/output records, default) or chat (conversations: "
                         "\"messages\" or ShareGPT \"conversations\", rendered with the tokenizer's chat template)")
    ap.add_argument("--labels", choices=ALPACA_LABELS + CHAT_LABELS, default=None,
                    help="dataprep's training objective. alpaca: mask-pad (default) puts no loss on the padding; "
                         "copy = the seed's labels = input_ids, pads included (seed parity); mask-prompt. chat: "
                         "assistant (default: every assistant reply and its end-of-turn token), last-assistant, "
                         "generation, all (docs/chat.md)")
    ap.add_argument("--chat-template", default=None, metavar="FILE",
                    help="chat: a Jinja chat template instead of the tokenizer's (dataprep --chat-template)")
    ap.add_argument("--date", default=None, metavar="YYYY-MM-DD",
                    help="chat: the date strftime_now renders (dataprep --date; default: today)")
    ap.add_argument("--mode", choices=["pad", "pack"], default="pad",
                    help="dataprep's rows: pad (default, the seed's one example per row) or pack (several examples "
                         "per row, kept apart: ferry.check_packing checks the model, the batches carry the "
                         "per-example attention keys and the step's token count)")
    ap.add_argument("--max-samples", type=int, default=0,
                    help="train on the first N records only (the seed's split=\"train[:8000]\": --max-samples 8000); "
                         "default: all of them")
    ap.add_argument("--rebuild-data", action="store_true",
                    help="replace a --data-dir made with another tokenizer, seq_len or labels (default: refuse)")
    ap.add_argument("--data-dir", default="/local_disk0/ferry-data")
    ap.add_argument("--checkpoint-dir", default="/local_disk0/ferry-dcp", help="shared by all workers")
    ap.add_argument("--output-dir", default="/Volumes/main/default/air_checkpoints/qwen25-3b-sft")
    ap.add_argument("--config-from", default="/tmp/ferry-tok", help="config.json + tokenizer files for the output")
    ap.add_argument("--dataprep", default=os.path.join(HERE, "bin", "dataprep"))
    ap.add_argument("--ckptmerge", default=os.path.join(HERE, "bin", "ckptmerge"))
    ap.add_argument("--ferry-serve", default=os.path.join(HERE, "bin", "ferry-serve"))
    ap.add_argument("--serve", metavar="SOCKET", default=None,
                    help="feed the workers from a ferry-serve daemon on SOCKET (the driver starts it after dataprep; "
                         "with --worker it must be running)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--save-every", type=int, default=50,
                    help="checkpoint (and report to Ray) every N steps, the resume point after a worker failure")
    ap.add_argument("--max-failures", type=int, default=1,
                    help="Ray Train FailureConfig: restarts of the workers, from the last checkpoint")
    ap.add_argument("--storage-path", default="/tmp/ray_results", help="RunConfig storage (shared on several nodes)")
    ap.add_argument("--num-workers", type=int, default=0, help="default: every GPU of the Ray cluster")
    ap.add_argument("--cpu", action="store_true", help="tiny model, gloo, DDP (tests); never chosen by itself")
    ap.add_argument("--vocab-size", type=int, default=8192, help="tiny model vocabulary (ids are folded into it)")
    ap.add_argument("--worker", action="store_true",
                    help="run train_func directly (under torchrun), without Ray; dataprep/ckptmerge not run")
    args = ap.parse_args(argv)
    if args.labels is None:
        args.labels = "assistant" if args.format == "chat" else "mask-pad"
    if (args.labels in CHAT_LABELS) != (args.format == "chat"):
        ap.error(f"--labels {args.labels} is not a policy of --format {args.format}: alpaca takes "
                 f"{', '.join(ALPACA_LABELS)}; chat takes {', '.join(CHAT_LABELS)}")
    if args.format != "chat" and (args.chat_template or args.date):
        ap.error("--chat-template and --date are for --format chat")
    if args.worker and not args.cpu and not torch.cuda.is_available():
        ap.error("CUDA is not available on this machine: check the GPU driver, or pass --cpu for the "
                 "CPU test mode (a tiny model, not the real one)")
    return args


NODE_LOCAL = ("/local_disk0", "/tmp", "/var/tmp", "/dev/shm")


def check_shared_paths(args, nodes):
    """On several nodes every worker reads --data-dir and writes
    --checkpoint-dir: node-local disk would leave the workers of the other
    nodes without a manifest (and the checkpoint in pieces)."""
    if nodes < 2:
        return
    local = [f"{name} {path}" for name, path in (("--data-dir", args.data_dir),
                                                 ("--checkpoint-dir", args.checkpoint_dir),
                                                 ("--storage-path", args.storage_path))
             if os.path.abspath(path).startswith(NODE_LOCAL)]
    if local:
        raise SystemExit(f"the Ray cluster has {nodes} nodes, but {', '.join(local)} is node-local: put it on "
                         "storage every node sees (a volume)")


def gpu_workers(args, cluster_resources):
    """Ray Train workers: --num-workers, else one per GPU of the cluster.
    No GPU without --cpu is an error, not a silent CPU run."""
    gpus = int(cluster_resources.get("GPU", 0))
    if not args.cpu and gpus == 0:
        raise SystemExit("the Ray cluster has no GPU (check the nodes' drivers and `ray start --num-gpus`); "
                         "pass --cpu for the CPU test mode")
    workers = args.num_workers or gpus
    if workers < 1:
        raise SystemExit("no workers: pass --num-workers with --cpu")
    return workers


def main(argv=None):
    args = parse_args(argv)
    tiny = args.cpu and not args.model
    config = {"lr": max(args.lr, 1e-2) if tiny else args.lr, "batch_size": args.batch_size, "model": args.model,
              "max_steps": args.max_steps, "data_dir": args.data_dir, "checkpoint_dir": args.checkpoint_dir,
              "cpu": args.cpu, "vocab_size": args.vocab_size, "serve": args.serve, "save_every": args.save_every}
    if args.worker:
        train_func(config)
        dist.barrier()
        dist.destroy_process_group()
        return

    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    own_ray = not ray.is_initialized()  # a caller (the e2e test) may have connected already
    if own_ray:
        ray.init(address="auto")
    workers = gpu_workers(args, ray.cluster_resources())
    check_shared_paths(args, sum(1 for n in ray.nodes() if n.get("Alive")))
    print(f"Ray cluster ready: {workers} worker(s)", flush=True)
    t0 = time.time()
    run_dataprep(args, workers)  # one shard per worker
    print(f"dataprep: {time.time() - t0:.1f}s", flush=True)
    daemon = start_ferry_serve(args) if args.serve else None

    trainer = TorchTrainer(
        train_func,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=not args.cpu),
        torch_config=TorchConfig(backend="gloo" if args.cpu else "nccl"),
        run_config=RunConfig(storage_path=args.storage_path, name="qwen-sft",
                             failure_config=FailureConfig(max_failures=args.max_failures)),
    )
    try:
        result = trainer.fit()
    finally:
        if daemon is not None:
            daemon.terminate()  # SIGTERM: clean stop
            daemon.wait()
    print(f"Training finished. Final metrics: {result.metrics}", flush=True)
    run_ckptmerge(args)
    if own_ray:
        ray.shutdown()
    return result


if __name__ == "__main__":
    main()
