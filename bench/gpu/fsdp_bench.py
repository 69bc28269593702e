#!/usr/bin/env python3
"""fsdp_bench.py -- the seeds' FSDP fine-tuning job on one NVIDIA GPU, fed the
seeds' way and ferry's way, then checkpointed the seeds' way and ferry's way.

Usage (on the GPU machine, from the repository root; no network needed):
    bench/gpu/prepare.sh [ALPACA_JSON]        # first, on the build machine
    python3 bench/gpu/fsdp_bench.py --prepared bench/work/gpu [--out result.json]
    python3 bench/gpu/fsdp_bench.py --smoke   # the same code paths on CPU (gloo, tiny
                                              # model, a few steps): tests/test_bench_gpu.py

Needs PyTorch >= 2.4 with CUDA, transformers >= 4.53 (4.x or 5.x), numpy: the
real stack ferry supports (python/README.md#supported-versions).
Nothing is downloaded: the model is a randomly initialised small Qwen2
(config below), the tokenizer is the repository's Qwen2.5 tokenizer.json, the
data is the prepared Alpaca file. Runs in well under 8 minutes on one H100/H200.

What it measures (one process = one rank of the seeds' 16-rank torchrun job:
FSDP FULL_SHARD, bf16 mixed precision, per-layer auto-wrap, gradient
checkpointing, AdamW lr 2e-5, micro-batch 4 x 1024, gradient accumulation 2):

  1. "seed" data path: inside the training process, format every Alpaca record,
     tokenizer(text, truncation=True, max_length=1024, padding="max_length"),
     labels = input_ids.copy(), a DistributedSampler + DataLoader.
  2. "ferry pad": bin/dataprep --mode pad (run once before training, timed on its
     own), then the ferry Loader over the mapped shard.
  3. "ferry pack": bin/dataprep --mode pack, examples packed into 1024-token
     rows with position_ids restarting per example.
  For each: time to first optimizer step (from the start of the phase: data
  set-up + model + FSDP wrap + the first step), and steady throughput over
  --steps optimizer steps after --warmup: positions/s (all B x L positions) and
  real tokens/s (non-padding tokens, the ones that carry training signal).
  The ferry phases use ferry.Loader(grad_accum=...) and ferry.to_device, so
  every micro-batch carries num_items_in_batch (the loss is the step's token
  mean) and, in pack mode, cu_seq_lens_q/k and max_length_q/k: examples in a
  row never attend to each other on flash_attention_2 or sdpa. The pack phase
  calls ferry.check_packing(model) first and reports its verdict.

  0. Isolation on this GPU (before the phases): a small random-init Qwen2 on
     real ferry pack batches (4 rows of several documents); for every
     document, the max |diff| between its logits in the packed batch and run
     alone, for sdpa (fp32), eager (fp32) and flash_attention_2 (bf16, when
     flash-attn is installed).

  4. Checkpoint, on the model trained in phase 3: the seeds' save (rank-0
     FULL_STATE_DICT gather + save_pretrained) vs ferry's (SHARDED_STATE_DICT
     saved with torch.distributed.checkpoint, then bin/ckptmerge to HF
     safetensors). The merged model is loaded back with
     AutoModelForCausalLM.from_pretrained and must give bitwise identical
     parameters and logits to the trained model's full state dict.

Prints one summary table and writes the figures as JSON (--out).
"""

import argparse
import contextlib
import functools
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

T_START = time.perf_counter()
BUDGET_S = 7 * 60  # stop starting new phases after this; the job must end < 8 min
SMOKE = "--smoke" in sys.argv[1:]  # CPU, gloo, tiny model: the script's own test

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel as FSDP  # noqa: E402
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy, StateDictType  # noqa: E402
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy  # noqa: E402
from torch.utils.data import DataLoader, Dataset, DistributedSampler  # noqa: E402

SEQ_LEN = 128 if SMOKE else 1024
BATCH = 2 if SMOKE else 4
GRAD_ACCUM = 2
LR = 2e-5
EOS = "<|endoftext|>"  # Qwen2.5 base: eos = pad

# A small Qwen2 (Qwen2.5 tokenizer vocabulary), random init.
MODEL_CONFIG = dict(
    vocab_size=151936, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
    num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, use_cache=False,
)
if SMOKE:
    MODEL_CONFIG.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2)


def log(msg):
    print(f"[{time.perf_counter() - T_START:7.1f}s] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sync():
    if torch.cuda.is_available() and not SMOKE:
        torch.cuda.synchronize()


# ---------------------------------------------------------------- model ----

def attn_impl():
    try:
        from transformers.utils import is_flash_attn_2_available
        if is_flash_attn_2_available():
            return "flash_attention_2"
    except ImportError:
        pass
    return "sdpa"


def new_model(cls, cfg, attn, dtype=None):
    """A randomly initialised model (bf16; fp32 in smoke mode) with the given
    attention kernel."""
    dtype = dtype or (torch.float32 if SMOKE else torch.bfloat16)
    return cls._from_config(cfg, attn_implementation=attn, dtype=dtype)


def build_model(device, attn):
    """The seed's model set-up: bf16 weights, use_cache off, gradient
    checkpointing, FSDP FULL_SHARD with bf16 mixed precision, one unit per
    decoder layer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer
    torch.manual_seed(0)
    cfg = Qwen2Config(**MODEL_CONFIG)
    model = new_model(Qwen2ForCausalLM, cfg, attn)
    model.config.use_cache = False
    model.gradient_checkpointing_enable()
    wrap = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer})
    mp = None if SMOKE else MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                           buffer_dtype=torch.bfloat16)
    model = FSDP(model, auto_wrap_policy=wrap, sharding_strategy=ShardingStrategy.FULL_SHARD, mixed_precision=mp,
                 device_id=device, use_orig_params=True)
    return model, cfg


# ----------------------------------------------------------------- data ----

def read_records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class RowsDataset(Dataset):
    """Map-style dataset of dict rows, as datasets' with_format("torch") gives."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def seed_loader(tok_dir, records_path):
    """The seeds' build_dataset + DistributedSampler, in-process."""
    from transformers import PreTrainedTokenizerFast
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tok_dir, "tokenizer.json"),
                                        eos_token=EOS, pad_token=EOS)
    rows = []
    for row in read_records(records_path):
        instruction, context, response = row.get("instruction", ""), row.get("input", ""), row.get("output", "")
        prompt = f"### Instruction:\n{instruction}\n\n"
        if context:
            prompt += f"### Input:\n{context}\n\n"
        text = f"{prompt}### Response:\n{response}{tokenizer.eos_token}"
        out = tokenizer(text, truncation=True, max_length=SEQ_LEN, padding="max_length")
        out["labels"] = out["input_ids"].copy()
        rows.append({k: torch.tensor(out[k]) for k in ("input_ids", "attention_mask", "labels")})
    ds = RowsDataset(rows)
    sampler = DistributedSampler(ds, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=True)
    sampler.set_epoch(0)
    return DataLoader(ds, batch_size=BATCH, sampler=sampler, drop_last=True), len(rows)


def ferry_loader(shards):
    import ferry
    # grad_accum: every micro-batch carries num_items_in_batch, the step's token count.
    loader = ferry.Loader(shards, BATCH, rank=dist.get_rank(), world_size=dist.get_world_size(), drop_last=True,
                          grad_accum=GRAD_ACCUM, num_items_in_batch=True)
    loader.set_epoch(0)
    return loader, loader.manifest.unique_rows


def run_dataprep(bin_dir, tok_dir, records_json, mode, out_dir):
    cmd = [os.path.join(bin_dir, "dataprep"), "--input", records_json, "--tokenizer", tok_dir,
           "--seq-len", str(SEQ_LEN), "--ranks", "1", "--mode", mode, "--out", out_dir]
    h = subprocess.run([cmd[0], "--help"], capture_output=True, text=True)
    if "-eos" in h.stdout + h.stderr:  # the base model's EOS (the fixture config is the Instruct one)
        cmd += ["--eos", EOS]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-2000:]}")
    return secs


# ---------------------------------------------------------------- train ----

def real_tokens(batch):
    """Non-padding tokens of a batch (the tokens that carry signal)."""
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    # Pack rows: every label is a token except -100 on padding and on the
    # first token of each example (one per example; position_ids restart at
    # 0 there, and padding keeps counting, so zeros mark example starts).
    return int((batch["labels"] != -100).sum()) + int((batch["position_ids"] == 0).sum())


def to_device(batch, device):
    import ferry
    return ferry.to_device(batch, device)  # ids to int64 on the device; pack keys and num_items_in_batch kept


def train_phase(name, make_loader, device, attn, warmup, steps, pack=False):
    """Time to first optimizer step and steady throughput of one data path."""
    sync()
    t0 = time.perf_counter()
    model, cfg = build_model(device, attn)
    packing = None
    if pack:
        import ferry
        packing = ferry.check_packing(model)  # PackingError (the phase fails) where documents would mix
        log(f"{name}: {packing}")
    loader, n_rows = make_loader()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model.train()
    it = iter(loader)
    res = {"phase": name, "rows": n_rows, "attn": attn, "packing": packing}
    step, micro, losses = 0, 0, []
    positions = tokens = 0
    t_measure = None
    total = warmup + steps + 1
    while step < total:
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        if step > warmup:
            positions += batch["input_ids"].numel()
            tokens += real_tokens(batch)
        b = to_device(batch, device)
        out = model(**b)
        (out.loss / GRAD_ACCUM).backward()
        micro += 1
        if micro % GRAD_ACCUM == 0:
            model.clip_grad_norm_(1.0)  # FSDP's: the global norm
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == 1:
                sync()
                res["first_step_s"] = time.perf_counter() - t0
                log(f"{name}: first step after {res['first_step_s']:.2f}s, loss {out.loss.item():.3f}")
            if step == warmup + 1:
                sync()
                t_measure = time.perf_counter()
            losses.append(out.loss.item() if step == total else None)
    sync()
    secs = time.perf_counter() - t_measure
    res.update({"steps": steps, "steady_s": secs, "positions_per_s": positions / secs,
                "tokens_per_s": tokens / secs, "padding_share": 1 - tokens / positions,
                "final_loss": losses[-1]})
    log(f"{name}: {res['tokens_per_s']:.0f} real tokens/s, {res['positions_per_s']:.0f} positions/s")
    return model, cfg, optimizer, res


# ------------------------------------------------------------ isolation ----

def isolation_check(shards, device):
    """Every document of ferry pack batches: its logits in the packed batch
    vs run alone, per attention implementation (max |diff|; documents come
    from the shard's segments column, an account of the boundaries that is
    independent of the batch's cu_seq_lens)."""
    import ferry
    from transformers import Qwen2Config, Qwen2ForCausalLM
    impls = [("sdpa", torch.float32), ("eager", torch.float32)]
    if device.type == "cuda" and attn_impl() == "flash_attention_2":
        impls.append(("flash_attention_2", torch.bfloat16))
    small = dict(hidden_size=64, intermediate_size=128) if SMOKE else dict(hidden_size=256, intermediate_size=512)
    cfg = Qwen2Config(**dict(MODEL_CONFIG, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **small))
    out = []
    for attn, dtype in impls:
        torch.manual_seed(0)
        model = new_model(Qwen2ForCausalLM, cfg, attn, dtype).to(device).eval()
        verdict = ferry.check_packing(model)
        ld = ferry.Loader(shards, 4, rank=0, world_size=1, shuffle=False, num_items_in_batch=False)
        worst, docs, several = 0.0, 0, 0
        with torch.no_grad():
            for (shard, row, rows), batch in zip(ld.schedule()[:1 if SMOKE else 2], ld):
                b = ferry.to_device(batch, device)
                logits = model(**b).logits.float()
                sf = ld.shards.shard(shard)
                for r in range(rows):
                    segs = sf.segments(row + r)
                    several += len(segs) > 1
                    for _, start, length in segs:
                        alone = model(input_ids=b["input_ids"][r:r + 1, start:start + length], use_cache=False).logits
                        worst = max(worst, float((alone[0].float() - logits[r, start:start + length]).abs().max()))
                        docs += 1
        ld.close()
        del model
        out.append({"attn": attn, "dtype": str(dtype).replace("torch.", ""), "documents": docs,
                    "rows_with_several": several, "max_abs_diff": worst, "check_packing": verdict})
        log(f"isolation {attn} {dtype}: {docs} documents, max |packed - alone| = {worst:.3g}")
    return out


# ----------------------------------------------------------- checkpoint ----

def dcp_save(state_dict, path):
    import torch.distributed.checkpoint as dcp
    dcp.save(state_dict, checkpoint_id=path)


def checkpoint_phase(model, cfg, tok_dir, bin_dir, work, device):
    from transformers import AutoModelForCausalLM, Qwen2ForCausalLM
    res = {}
    # The seeds' save: gather the full state dict on rank 0, save_pretrained.
    full_dir = os.path.join(work, "seed-full")
    sync()
    t0 = time.perf_counter()
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                              FullStateDictConfig(offload_to_cpu=True, rank0_only=True)):
        cpu_state = model.state_dict()
    res["seed_gather_s"] = time.perf_counter() - t0
    model.module.save_pretrained(full_dir, state_dict=dict(cpu_state))  # transformers 5 empties the dict it is given
    res["seed_save_s"] = time.perf_counter() - t0

    # ferry's way: sharded DCP save (no gather), then ckptmerge.
    dcp_dir = os.path.join(work, "dcp")
    sync()
    t0 = time.perf_counter()
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        sharded = model.state_dict()
        dcp_save(sharded, dcp_dir)
    dist.barrier()
    res["dcp_save_s"] = time.perf_counter() - t0
    res["dcp_bytes"] = sum(os.path.getsize(os.path.join(dcp_dir, f)) for f in os.listdir(dcp_dir))

    cfg_dir = os.path.join(work, "config")
    cfg.save_pretrained(cfg_dir)
    merged = os.path.join(work, "merged")
    cmd = [os.path.join(bin_dir, "ckptmerge")]
    help_text = subprocess.run(cmd + ["--help"], capture_output=True, text=True)
    help_text = help_text.stdout + help_text.stderr
    if "config-from" in help_text:
        cmd += ["--config-from", cfg_dir]
    cmd += [dcp_dir, merged]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    res["ckptmerge_s"] = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-2000:]}")
    if not os.path.exists(os.path.join(merged, "config.json")):
        shutil.copy(os.path.join(cfg_dir, "config.json"), os.path.join(merged, "config.json"))

    # Load back and compare with the trained model's full state dict. Both
    # sides use the same (eager) attention so that logits can be bitwise equal.
    ref = new_model(Qwen2ForCausalLM, cfg, "eager")
    missing, unexpected = ref.load_state_dict(cpu_state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"full state dict: missing {missing[:5]}, unexpected {unexpected[:5]}")
    t0 = time.perf_counter()
    back = AutoModelForCausalLM.from_pretrained(merged, dtype=next(ref.parameters()).dtype, attn_implementation="eager")
    res["from_pretrained_s"] = time.perf_counter() - t0
    ref_sd, back_sd = ref.state_dict(), back.state_dict()
    diff = [k for k in ref_sd if k not in back_sd or back_sd[k].dtype != ref_sd[k].dtype
            or not torch.equal(back_sd[k], ref_sd[k])]
    res["params_identical"] = not diff
    res["params_differing"] = diff[:10]
    ref.to(device).eval()
    back.to(device).eval()
    torch.manual_seed(1)
    probe = torch.randint(0, cfg.vocab_size, (2, 128), device=device)
    with torch.no_grad():
        a = ref(input_ids=probe).logits
        b = back(input_ids=probe).logits
    res["logits_identical"] = bool(torch.equal(a, b))
    res["logits_max_abs_diff"] = float((a.float() - b.float()).abs().max())
    return res


# ----------------------------------------------------------------- main ----

def unpack(prepared, work):
    """Unzips the prepared binaries and tokenizer into work; returns (bin_dir, tok_dir)."""
    bin_dir, tok_dir = os.path.join(work, "bin"), os.path.join(work, "tok", "qwen2.5")
    os.makedirs(bin_dir)
    os.makedirs(tok_dir)
    for name in ("dataprep", "ckptmerge"):
        dst = os.path.join(bin_dir, name)
        with gzip.open(os.path.join(prepared, "bin", name + ".gz"), "rb") as f, open(dst, "wb") as g:
            shutil.copyfileobj(f, g)
        os.chmod(dst, 0o755)
    with gzip.open(os.path.join(prepared, "tok", "qwen2.5", "tokenizer.json.gz"), "rb") as f, \
            open(os.path.join(tok_dir, "tokenizer.json"), "wb") as g:
        shutil.copyfileobj(f, g)
    cfg = os.path.join(prepared, "tok", "qwen2.5", "tokenizer_config.json")
    if os.path.exists(cfg):
        shutil.copy(cfg, tok_dir)
    return bin_dir, tok_dir


def table(rows, headers):
    w = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(n) for x, n in zip(r, w))  # noqa: E731
    return "\n".join([line(headers), line(["-" * n for n in w])] + [line(r) for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepared", default=os.path.join(REPO, "bench/work/gpu"),
                    help="what bench/gpu/prepare.sh made (bin/, tok/qwen2.5/, alpaca.json.gz)")
    ap.add_argument("--out", default=None, help="JSON results (default: $OUT/gpu-bench.json or PREPARED/result.json)")
    ap.add_argument("--records", type=int, default=0, help="use only the first N records (0 = all)")
    ap.add_argument("--warmup", type=int, default=3, help="optimizer steps before the steady measurement")
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps measured")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, gloo, fp32, a tiny model, 64 records, 2 steps: checks the script itself")
    a = ap.parse_args()
    if a.smoke:
        a.records, a.warmup, a.steps = a.records or 64, 0, 2
    elif not torch.cuda.is_available():
        sys.exit("fsdp_bench: no CUDA device (--smoke runs on CPU)")
    prepared = os.path.abspath(a.prepared)
    for p in ("bin/dataprep.gz", "bin/ckptmerge.gz", "tok/qwen2.5/tokenizer.json.gz", "alpaca.json.gz"):
        if not os.path.exists(os.path.join(prepared, p)):
            sys.exit(f"fsdp_bench: {prepared}/{p} is missing: run bench/gpu/prepare.sh on the build machine "
                     "and carry bench/work/gpu")
    out_path = a.out or (os.path.join(os.environ["OUT"], "gpu-bench.json") if os.environ.get("OUT")
                         else os.path.join(prepared, "result.json"))

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    local_rank = int(os.environ["LOCAL_RANK"])
    if a.smoke:
        dist.init_process_group(backend="gloo")
        device = torch.device("cpu")
    else:
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(local_rank)
        device = torch.device(f"cuda:{local_rank}")
    import transformers
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (smoke)",
            "model": MODEL_CONFIG, "seq_len": SEQ_LEN, "batch": BATCH, "grad_accum": GRAD_ACCUM}
    attn = "sdpa" if a.smoke else attn_impl()
    log(f"{info['gpu']}, torch {info['torch']}, transformers {info['transformers']}, attention {attn}")

    work = tempfile.mkdtemp(prefix="ferry-gpu-bench-")
    results = {"info": info, "phases": [], "errors": []}
    try:
        bin_dir, tok_dir = unpack(prepared, work)
        records = read_records(os.path.join(prepared, "alpaca.json.gz"))
        if a.records:
            records = records[:a.records]
        records_json = os.path.join(work, "alpaca.json")
        with open(records_json, "w", encoding="utf-8") as f:
            json.dump(records, f, ensure_ascii=False)
        info["records"] = len(records)
        del records

        phases = [
            (f"seed: in-process tokenize, pad {SEQ_LEN}, DistributedSampler", None,
             lambda: seed_loader(tok_dir, records_json)),
            ("ferry pad", "pad", lambda: ferry_loader(os.path.join(work, "shards-pad"))),
            ("ferry pack", "pack", lambda: ferry_loader(os.path.join(work, "shards-pack"))),
        ]
        try:
            iso_dir = os.path.join(work, "shards-iso")
            run_dataprep(bin_dir, tok_dir, records_json, "pack", iso_dir)
            results["isolation"] = isolation_check(iso_dir, device)
        except Exception as e:
            results["errors"].append(f"isolation: {type(e).__name__}: {e}")
            log(f"isolation: FAILED: {e}")
        model = cfg = None
        for name, mode, make in phases:
            if time.perf_counter() - T_START > BUDGET_S:
                results["errors"].append(f"{name}: skipped, out of time")
                continue
            try:
                prep_s = None
                if mode is not None:
                    prep_s = run_dataprep(bin_dir, tok_dir, records_json, mode, os.path.join(work, f"shards-{mode}"))
                    log(f"dataprep --mode {mode}: {prep_s:.2f}s")
                del model
                model = None
                torch.cuda.empty_cache()
                model, cfg, opt, res = train_phase(name, make, device, attn, a.warmup, a.steps, pack=mode == "pack")
                del opt
                res["dataprep_s"] = prep_s
                results["phases"].append(res)
            except Exception as e:  # report and go on with the other phases
                results["errors"].append(f"{name}: {type(e).__name__}: {e}")
                log(f"{name}: FAILED: {e}")
        if model is not None and time.perf_counter() - T_START < BUDGET_S:
            try:
                results["checkpoint"] = checkpoint_phase(model, cfg, tok_dir, bin_dir, work, device)
            except Exception as e:
                results["errors"].append(f"checkpoint: {type(e).__name__}: {e}")
                log(f"checkpoint: FAILED: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()

    results["elapsed_s"] = time.perf_counter() - T_START
    with open(out_path, "w") as f:
        json.dump(results, f, indent=2)

    # ---- the summary table
    seed = next((p for p in results["phases"] if p["phase"].startswith("seed")), None)
    rows = []
    for p in results["phases"]:
        rows.append([
            p["phase"], f"{p['rows']}", "—" if p.get("dataprep_s") is None else f"{p['dataprep_s']:.1f}",
            f"{p['first_step_s']:.1f}",
            "—" if seed is None else f"{seed['first_step_s'] / p['first_step_s']:.2f}x",
            f"{p['positions_per_s']:.0f}", f"{p['tokens_per_s']:.0f}",
            "—" if seed is None else f"{p['tokens_per_s'] / seed['tokens_per_s']:.2f}x",
            f"{100 * p['padding_share']:.0f}%",
        ])
    print(f"\nferry GPU bench: {info['gpu']}, torch {info['torch']}, transformers {info['transformers']}, "
          f"attention {attn}; Qwen2 {MODEL_CONFIG['num_hidden_layers']}L/{MODEL_CONFIG['hidden_size']}, "
          f"FSDP FULL_SHARD {'fp32' if SMOKE else 'bf16'}, batch {BATCH}x{SEQ_LEN}, grad accum {GRAD_ACCUM}, {info.get('records')} records\n")
    print(table(rows, ["data path", "rows", "dataprep s", "first step s", "vs seed", "positions/s",
                       "real tokens/s", "vs seed", "padding"]))
    for p in results["phases"]:
        if p.get("packing"):
            print(f"{p['phase']}: ferry.check_packing: {p['packing']}")
    iso = results.get("isolation")
    if iso:
        print()
        print(table([[r["attn"], r["dtype"], r["documents"], r["rows_with_several"], f"{r['max_abs_diff']:.3g}"]
                     for r in iso], ["isolation: attention", "dtype", "documents", "rows of several",
                                     "max |packed - alone|"]))
    c = results.get("checkpoint")
    if c:
        print()
        print(table([
            ["seed: FULL_STATE_DICT gather + save_pretrained", f"{c['seed_save_s']:.2f}", "(gather alone %.2f s)" % c["seed_gather_s"]],
            ["ferry: sharded DCP save (no gather)", f"{c['dcp_save_s']:.2f}", f"{c['dcp_bytes'] / 1e6:.0f} MB"],
            ["ferry: ckptmerge DCP -> safetensors", f"{c['ckptmerge_s']:.2f}", ""],
            ["from_pretrained(merged): parameters identical", str(c["params_identical"]), ", ".join(c["params_differing"])],
            ["from_pretrained(merged): logits identical", str(c["logits_identical"]), f"max |diff| {c['logits_max_abs_diff']:g}"],
        ], ["checkpoint", "seconds / result", ""]))
    for e in results["errors"]:
        print(f"error: {e}")
    print(f"\n{results['elapsed_s']:.0f} s in all; JSON: {out_path}")
    iso_ok = bool(iso) and all(r["max_abs_diff"] <= (1e-4 if r["dtype"] == "float32" else 5e-2) for r in iso)
    ok = not results["errors"] and c and c["params_identical"] and c["logits_identical"] and iso_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
