#!/usr/bin/env python3
"""The parts of bench/gpu/run.sh (see README.md there). run.sh runs each
part as its own process under a time cap:

    check.py PART --results R --work W --prepared P --repo REPO [--cpu-smoke]

PART is one of
  prep        machine and versions; dataprep (pad --labels copy, pack, and the
              256-token pack shards of the packing check); ferry-serve gives
              the direct Loader's batches
  packing     packed-document isolation on CUDA: tiny random-init Qwen2 and
              Llama in bf16, batch 4, on sdpa with the flash, memory-efficient
              and cuDNN backends forced, on compiled flex_attention, and on
              flash_attention_2/3 where installed; a leak control
  train       a Qwen2.5-0.5B-shaped model (random init, bf16) trained three
              ways: the seed's data path, ferry pad, ferry pack; the seed's
              first-step loss against ferry pad --labels copy on the same
              rows; a DCP checkpoint of the trained model written from the GPU
  checkpoint  ckptmerge of that checkpoint, from_pretrained on the GPU, logits
              against the trained model's; ferry.load_pretrained when it exists
and the bookkeeping verbs mark (a part's status, from run.sh) and summary
(results.json's verdict and summary.md).

Each part writes its section of R (results.json) as it goes, atomically, so
a part killed at its cap leaves what it measured. Every check is an entry
{"name", "pass": true | false | null, ...}: null is "not available" (a
feature that does not exist yet), never a failure.

With --cpu-smoke the same code runs on CPU at toy sizes: every number is a
CPU number and every device part says "stub" (what stood in for the GPU).
"""

import argparse
import ast
import contextlib
import datetime
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import traceback

T0 = time.perf_counter()

# ------------------------------------------------------------------ sizes --

# The seed's job (Ray Train seed: Qwen2.5, batch 4 x 1024, AdamW 2e-5, clip 1.0,
# no gradient accumulation) on a model of Qwen/Qwen2.5-0.5B's shape.
QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643,
                  eos_token_id=151643, use_cache=False)
SIZES = {
    "gpu": dict(seq_len=1024, batch=4, steps=40, warmup=5, lr=2e-5, model=QWEN25_05B,
                pack_seq_len=256, pack_batch=4, pack_batches=2,
                tiny=dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)),
    "smoke": dict(seq_len=64, batch=2, steps=3, warmup=1, lr=2e-5,
                  model=dict(QWEN25_05B, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2),
                  pack_seq_len=256, pack_batch=4, pack_batches=1,
                  tiny=dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)),
}
TINY_VOCAB = 512  # token ids of the real shards folded into it (python/tests/packing_workers/tiny.py)
# bf16 tolerance of a document's logits, packed vs alone: an absolute bound
# plus a share of the largest |logit|. bf16 keeps 8 significant bits (a
# relative step of 2^-8 = 0.0039); packed and alone run other kernel shapes,
# so a few roundings differ through 2 layers. The leak control (documents
# allowed to see each other) must move the logits by more than the bound.
TOL_ABS, TOL_REL = 2e-2, 2e-2
LOSS_REL = 1e-5  # seed vs ferry pad --labels copy, same rows, same model: sum/N vs mean in fp32
QWEN_BASE_SPECIAL = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}  # Qwen/Qwen2.5-0.5B's config
LLAMA_EOS = "<|end_of_text|>"  # meta-llama/Llama-3.1-8B's eos (the bundled config is the Instruct one)
SEED_SCRIPT = os.path.join("python", "tests", "seeds", "ray_train", "train_ray.py")
SEED_MARKER = "# ---- end of header: below, the seed's text verbatim ----\n"


def log(msg):
    print(f"  [{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------- results --

class Results:
    """results.json: {"run": {...}, "parts": {name: section}}; every write
    replaces the file atomically."""

    def __init__(self, path):
        self.path = path

    def load(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"parts": {}}

    def store(self, data):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(tmp, self.path)

    def put(self, part, section):
        data = self.load()
        data.setdefault("parts", {})[part] = section
        self.store(data)

    def get(self, part):
        return self.load().get("parts", {}).get(part) or {}


class Ctx:
    def __init__(self, a):
        self.a = a
        self.smoke = a.cpu_smoke
        self.size = SIZES["smoke" if self.smoke else "gpu"]
        self.work = a.work
        self.repo = a.repo
        self.prepared = a.prepared
        self.results = Results(a.results)
        self.bin = os.path.join(a.work, "bin")
        self.sec = None
        self.part = None
        self._torch = None

    @property
    def device(self):
        import torch
        if self.smoke:
            return torch.device("cpu")
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device (torch.cuda.is_available() is False); --cpu-smoke runs on CPU")
        return torch.device("cuda", 0)

    def begin(self, part, **fields):
        self.part = part
        self.sec = {"status": "running", "started": now_iso(), "device": "cpu (smoke)" if self.smoke else "cuda",
                    "checks": [], **fields}
        self.flush()
        return self.sec

    def flush(self):
        self.sec["elapsed_s"] = round(time.perf_counter() - T0, 2)
        self.results.put(self.part, self.sec)

    def check(self, name, ok, **detail):
        """Record a check (ok: True, False or None = not available)."""
        self.sec["checks"] = [c for c in self.sec["checks"] if c["name"] != name]
        self.sec["checks"].append({"name": name, "pass": ok, **detail})
        self.flush()
        log(f"check {name}: {'PASS' if ok else 'not available' if ok is None else 'FAIL'}"
            f"{'' if not detail.get('detail') else ' - ' + str(detail['detail'])}")

    def sync(self):
        import torch
        if not self.smoke:
            torch.cuda.synchronize()

    def path(self, *p):
        return os.path.join(self.work, *p)


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def dataset_dir(ctx, name):
    return ctx.path("data", name)


def qwen_base_dir(ctx):
    """The bundled Qwen2.5 tokenizer.json with the base model's special tokens
    (the bundled tokenizer_config.json is the Instruct model's): what the
    seed's AutoTokenizer.from_pretrained("Qwen/Qwen2.5-...") loads and what
    dataprep reads."""
    d = ctx.path("tok-base", "qwen2.5")
    if not os.path.exists(os.path.join(d, "tokenizer_config.json")):
        os.makedirs(d, exist_ok=True)
        src = ctx.path("tok", "qwen2.5")
        shutil.copy(os.path.join(src, "tokenizer.json"), d)
        with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        cfg.update(QWEN_BASE_SPECIAL)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
    return d


# ------------------------------------------------------------------- prep --

def machine_info(ctx):
    import torch
    info = {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "cpu": None, "memory_gib": None}
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as f:
            kb = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1])
            info["memory_gib"] = round(kb / 2**20, 1)
    if not ctx.smoke and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                       "capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count,
                       "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
        with contextlib.suppress(Exception):
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            info["gpu"]["nvidia_smi"] = q.stdout.strip()
    else:
        info["gpu"] = None
    return info


def versions(ctx):
    import ferry
    v = {n: version(n) for n in ("torch", "transformers", "accelerate", "safetensors", "tokenizers", "pyarrow",
                                 "numpy", "flash-attn", "flash_attn_3", "kernels", "datasets")}
    v["ferry"] = getattr(ferry, "__version__", None)
    v["ferry_from"] = os.path.dirname(ferry.__file__)
    for b in ("dataprep", "ckptmerge", "ferry-serve"):
        r = subprocess.run([os.path.join(ctx.bin, b), "--version"], capture_output=True, text=True, timeout=20)
        text = (r.stdout + r.stderr).strip()
        v[b] = text.splitlines()[0] if text else f"exit {r.returncode}"
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(ctx.prepared, "prepared.json")) as f:
            p = json.load(f)
        v["prepared"] = {k: p.get(k) for k in ("commit", "source_tree_modified", "go", "date", "bytes")}
    return v


def dataprep(ctx, name, tok_dir, seq_len, mode, extra=()):
    out = dataset_dir(ctx, name)
    cmd = [os.path.join(ctx.bin, "dataprep"), "--input", ctx.path("alpaca.json"), "--tokenizer", tok_dir,
           "--seq-len", str(seq_len), "--ranks", "1", "--mode", mode, "--out", out, "--quiet", *extra]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    secs = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-2000:]}")
    import ferry
    m = ferry.read_manifest(out)
    with open(os.path.join(out, "manifest.json")) as f:
        raw = json.load(f)
    return {"cmd": " ".join(cmd[1:]), "seconds": round(secs, 3), "rows": m.unique_rows, "seq_len": m.seq_len,
            "mode": m.mode, "labels": raw.get("labels"), "stats": raw.get("stats", {})}


def part_prep(ctx):
    sec = ctx.begin("prep", stub="CPU run: no GPU fields" if ctx.smoke else None)
    sec["machine"] = machine_info(ctx)
    sec["versions"] = versions(ctx)
    ctx.flush()
    log(f"machine: {sec['machine'].get('gpu') or 'CPU'}; torch {sec['versions']['torch']}, "
        f"transformers {sec['versions']['transformers']}, ferry from {sec['versions']['ferry_from']}")
    s = ctx.size
    qwen = qwen_base_dir(ctx)
    runs = {
        "pad-copy": (qwen, s["seq_len"], "pad", ["--labels", "copy"]),
        "pack": (qwen, s["seq_len"], "pack", []),
        "pack-qwen2-256": (qwen, s["pack_seq_len"], "pack", []),
        "pack-llama-256": (ctx.path("tok", "llama3.1"), s["pack_seq_len"], "pack", ["--eos", LLAMA_EOS]),
    }
    sec["dataprep"] = {}
    for name, (tok, L, mode, extra) in runs.items():
        sec["dataprep"][name] = dataprep(ctx, name, tok, L, mode, extra)
        ctx.flush()
        log(f"dataprep {name}: {sec['dataprep'][name]['seconds']:.2f}s, {sec['dataprep'][name]['rows']} rows")
    ctx.check("dataprep", all(d["rows"] for d in sec["dataprep"].values()),
              detail=", ".join(f"{k} {v['rows']} rows" for k, v in sec["dataprep"].items()))
    serve_check(ctx, dataset_dir(ctx, "pad-copy"))
    sec["status"] = "done"
    ctx.flush()


def serve_check(ctx, data):
    """ferry-serve on the pad shards: its first batches equal the direct
    Loader's, and how long the first one takes."""
    import ferry
    import torch
    sock = ctx.path("serve.sock")
    tmpdir = None
    if len(sock) > 100:  # AF_UNIX path limit
        import tempfile
        tmpdir = tempfile.mkdtemp(prefix="fg")
        sock = os.path.join(tmpdir, "s")
    logf = open(ctx.path("ferry-serve.log"), "w+")
    proc = subprocess.Popen([os.path.join(ctx.bin, "ferry-serve"), "--data", data, "--ranks", "0", "--socket", sock],
                            stdout=logf, stderr=subprocess.STDOUT)
    try:
        t = time.perf_counter()
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                logf.seek(0)
                raise RuntimeError(f"ferry-serve exited {proc.returncode}: {logf.read()[-1000:]}")
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as c:
                c.connect(sock)
                break
            if time.monotonic() > deadline:
                raise RuntimeError("ferry-serve did not listen within 30 s")
            time.sleep(0.05)
        listen_s = time.perf_counter() - t
        B = ctx.size["batch"]
        direct = ferry.Loader(data, B, rank=0, world_size=1, drop_last=True)
        served = ferry.Loader(data, B, rank=0, world_size=1, drop_last=True, serve=sock)
        t = time.perf_counter()
        same, n = True, 0
        for a, b in zip(direct, served):
            same &= all(torch.equal(a[k], b[k]) for k in ("input_ids", "attention_mask", "labels"))
            n += 1
            if n == 1:
                first_s = time.perf_counter() - t
            if n == 8:
                break
        served.close()
        direct.close()
        ctx.sec["ferry_serve"] = {"listen_s": round(listen_s, 3), "first_batch_s": round(first_s, 4), "batches": n}
        ctx.check("ferry-serve batches equal the direct Loader's", same and n == 8, detail=f"{n} batches")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logf.close()
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


# ---------------------------------------------------------------- packing --

def attention_availability():
    """Which varlen / flash paths this image has."""
    import torch
    out = {}
    try:
        from transformers.utils import is_flash_attn_2_available
        out["flash_attention_2"] = bool(is_flash_attn_2_available())
    except ImportError:
        out["flash_attention_2"] = False
    try:
        from transformers.utils import is_flash_attn_3_available
        out["flash_attention_3"] = bool(is_flash_attn_3_available())
    except ImportError:
        out["flash_attention_3"] = importlib.util.find_spec("flash_attn_interface") is not None
    out["kernels (hub flash kernels)"] = importlib.util.find_spec("kernels") is not None
    out["torch.nn.attention.varlen"] = importlib.util.find_spec("torch.nn.attention.varlen") is not None
    out["cuda"] = torch.cuda.is_available()
    return out


def tiny_model(ctx, arch, impl):
    import torch
    import transformers
    cfg_cls, cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[arch]
    torch.manual_seed(0)
    cfg = cfg_cls(vocab_size=TINY_VOCAB, num_hidden_layers=2, max_position_embeddings=512, **ctx.size["tiny"])
    model = cls._from_config(cfg, attn_implementation=impl, dtype=torch.bfloat16)
    return model.to(ctx.device).eval()


def fold(batch):
    import torch
    out = dict(batch)
    out["input_ids"] = batch["input_ids"] % TINY_VOCAB
    out["labels"] = torch.where(batch["labels"] < 0, batch["labels"], batch["labels"] % TINY_VOCAB)
    return out


def packed_vs_alone(ctx, model, data, cm=contextlib.nullcontext, overrides=None):
    """Max |logit difference| between each document of the first batches in
    the packed batch and the same document alone (right-padded rows of the
    same shape, no mask: causal attention keeps the padding after a document
    out of it). Documents come from the shard's segments column, not from
    the batch's cu_seq_lens. The packed batch runs under cm() (a forced
    kernel: its error propagates); the documents alone too, unless the
    forced kernel refuses them (e.g. a backend without grouped-query
    attention): then under the default dispatch, and the result says so."""
    import ferry
    import torch
    s = ctx.size
    ld = ferry.Loader(data, s["pack_batch"], rank=0, world_size=1, shuffle=False, num_items_in_batch=False)
    worst, scale, docs, several = 0.0, 0.0, 0, 0
    alone_note = None

    def run_alone(ids):
        nonlocal alone_note
        if alone_note is None:
            try:
                with cm():
                    return model(input_ids=ids, use_cache=False).logits.float()
            except Exception as e:
                alone_note = (f"the documents alone ran on the default dispatch: the forced kernel refused them "
                              f"({type(e).__name__}: {str(e).strip()[:200]})")
        return model(input_ids=ids, use_cache=False).logits.float()

    with torch.no_grad():
        for (shard, row, rows), batch in zip(ld.schedule()[:s["pack_batches"]], ld):
            b = fold(ferry.to_device(batch, ctx.device))
            b.update(overrides or {})
            try:
                with cm():
                    packed = model(**b).logits.float()
            except RuntimeError as e:  # e.g. sdpa's flash kernel: "No available kernel"
                raise KernelRefused(f"{type(e).__name__}: {str(e).strip()[:300]}") from e
            sf = ld.shards.shard(shard)
            segs = []
            for r in range(rows):
                rs = sf.segments(row + r)
                several += len(rs) > 1
                segs += [(r, start, length) for _, start, length in rs]
            for i in range(0, len(segs), rows):
                chunk = segs[i:i + rows]
                ids = torch.zeros_like(b["input_ids"])
                for j, (r, start, length) in enumerate(chunk):
                    ids[j, :length] = b["input_ids"][r, start:start + length]
                alone = run_alone(ids)
                for j, (r, start, length) in enumerate(chunk):
                    a, p = alone[j, :length], packed[r, start:start + length]
                    worst = max(worst, float((a - p).abs().max()))
                    scale = max(scale, float(a.abs().max()))
                    docs += 1
    ld.close()
    return {"max_abs_diff": worst, "max_abs_logit": scale, "documents": docs, "rows_with_several": several,
            "tolerance": TOL_ABS + TOL_REL * scale, "alone": alone_note or "under the same kernel"}


class KernelRefused(Exception):
    """The forced kernel raised on the packed batch (it cannot take what
    transformers passes it): nothing ran, so nothing leaked."""


@contextlib.contextmanager
def unfused_flex():
    """CPU smoke: transformers' flex path with torch's unfused flex_attention
    in place of the torch.compile'd kernel, and its BlockMask built without
    compiling (Inductor on a small CPU takes minutes;
    python/tests/e2e/test_packing.py does the same for the kernel)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    import transformers.integrations.flex_attention as fa
    import transformers.masking_utils as mu
    saved = fa.compile_friendly_flex_attention, getattr(mu, "create_block_mask", None)
    fa.compile_friendly_flex_attention = lambda q, k, v, training=False, **kw: flex_attention(q, k, v, **kw)
    if saved[1] is not None:
        mu.create_block_mask = lambda *a, **kw: create_block_mask(*a, **dict(kw, _compile=False))
    try:
        yield
    finally:
        fa.compile_friendly_flex_attention = saved[0]
        if saved[1] is not None:
            mu.create_block_mask = saved[1]


def part_packing(ctx):
    import warnings

    import ferry
    from torch.nn.attention import SDPBackend, sdpa_kernel
    warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
    avail = attention_availability()
    sec = ctx.begin("packing", tolerance={"abs": TOL_ABS, "rel_of_max_logit": TOL_REL,
                                          "rule": "max |packed - alone| <= abs + rel * max |logit|, bf16"},
                    available=avail, results=[],
                    stub=("CPU: sdpa's math backend stands in for the flash, memory-efficient and cuDNN "
                          "backends, torch's unfused flex_attention (and an uncompiled BlockMask) for the "
                          "compiled kernel") if ctx.smoke else None)
    log(f"attention paths: {avail}")
    data = {"qwen2": dataset_dir(ctx, "pack-qwen2-256"), "llama": dataset_dir(ctx, "pack-llama-256")}
    math = SDPBackend.MATH
    # (impl, variant, context, must it run: False = it may refuse the packed batch)
    cases = [
        ("sdpa", "flash", lambda: sdpa_kernel(math if ctx.smoke else SDPBackend.FLASH_ATTENTION), False),
        ("sdpa", "mem-efficient", lambda: sdpa_kernel(math if ctx.smoke else SDPBackend.EFFICIENT_ATTENTION), True),
        ("sdpa", "cudnn", lambda: sdpa_kernel(math if ctx.smoke else SDPBackend.CUDNN_ATTENTION), False),
        ("flex_attention", "compiled", unfused_flex if ctx.smoke else contextlib.nullcontext, True),
    ]
    for fa in ("flash_attention_2", "flash_attention_3"):
        if avail.get(fa) and not ctx.smoke:
            cases.append((fa, "varlen (cu_seq_lens)", contextlib.nullcontext, True))
        else:
            sec.setdefault("absent", []).append(fa)
    models = {}

    def model_for(arch, impl):  # one per (arch, attention): the forced backends share it
        if (arch, impl) not in models:
            models.clear()
            models[arch, impl] = tiny_model(ctx, arch, impl)
        return models[arch, impl]

    for arch in ("qwen2", "llama"):
        for impl, variant, cm, must in cases:
            row = {"arch": arch, "attn": impl, "variant": variant, "dtype": "bfloat16"}
            t = time.perf_counter()
            try:
                model = model_for(arch, impl)
                row["check_packing"] = ferry.check_packing(model)
                row.update(packed_vs_alone(ctx, model, data[arch], cm))
                ok = row["max_abs_diff"] <= row["tolerance"] and row["rows_with_several"] >= 1
                row["outcome"] = "equal" if ok else "LEAK"
            except KernelRefused as e:  # a forced kernel that cannot take the per-document mask
                row["outcome"] = "refused"
                row["error"] = str(e).splitlines()[0] if str(e) else "refused"
                ok = not must
            except Exception as e:
                row["outcome"] = "error"
                row["error"] = f"{type(e).__name__}: {e}"[:400]
                row["traceback"] = traceback.format_exc()[-3000:]
                ok = False
            row["seconds"] = round(time.perf_counter() - t, 2)
            sec["results"].append(row)
            name = f"isolation {arch} {impl} {variant}"
            if row["outcome"] in ("equal", "LEAK"):
                detail = (f"{row['documents']} documents, max |packed - alone| {row['max_abs_diff']:.3g} "
                          f"{'<=' if ok else '>'} {row['tolerance']:.3g}")
            elif row["outcome"] == "refused":
                detail = (f"refused the packed batch ({row['error']}): nothing ran, nothing leaked; "
                          + ("but this path must run" if must else
                             "transformers' sdpa passes a per-document mask this kernel does not take"))
            else:
                detail = row["error"]
            ctx.check(name, ok, detail=detail, outcome=row["outcome"])
    # Leak control: with a cache (config.use_cache's default) transformers
    # builds no per-document mask: the check must see that as a leak.
    for arch in ("qwen2", "llama"):
        model = model_for(arch, "sdpa")
        r = packed_vs_alone(ctx, model, data[arch], overrides={"use_cache": True})  # sdpa's own dispatch
        seen = r["max_abs_diff"] > r["tolerance"]
        r.update(arch=arch, attn="sdpa", variant="leak control: use_cache=True",
                 outcome="leak seen" if seen else "LEAK NOT SEEN")
        sec["results"].append(r)
        ctx.check(f"leak control {arch}: documents that see each other exceed the tolerance",
                  seen, detail=f"max |packed - alone| {r['max_abs_diff']:.3g} "
                  f"> {r['tolerance']:.3g}")
    for fa in sec.get("absent", []):
        ctx.check(f"isolation {fa}", None, detail="not installed in this image" if not ctx.smoke else "not on CPU")
    sec["status"] = "done"
    ctx.flush()


# ------------------------------------------------------------------ train --

class RowsDataset:
    """Stands in for a ``datasets.Dataset`` (the device image has no
    ``datasets``): ``map(fn, remove_columns=...)`` row by row, as datasets
    calls the seed's ``format_example``; ``with_format("torch")`` gives each
    column as a tensor, as datasets' torch format does; ``column_names``."""

    def __init__(self, rows, fmt=None):
        self.rows, self.fmt = rows, fmt

    @property
    def column_names(self):
        return list(self.rows[0]) if self.rows else []

    def map(self, fn, remove_columns=()):
        out = []
        for row in self.rows:
            new = {k: v for k, v in row.items() if k not in remove_columns}
            new.update(dict(fn(dict(row))))
            out.append(new)
        return RowsDataset(out, self.fmt)

    def with_format(self, fmt=None, **_):
        return RowsDataset(self.rows, fmt)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        import torch
        row = self.rows[i]
        return {k: torch.tensor(v) for k, v in row.items()} if self.fmt == "torch" else row


def seed_build_dataset(ctx, tok_dir, seq_len):
    """The Ray Train seed's own build_dataset (Qwen2.5), compiled from its
    verbatim copy in python/tests/seeds/, with load_dataset pointed at the
    local sample and the seed's tokenizer set-up."""
    from transformers import AutoTokenizer
    path = os.path.join(ctx.repo, SEED_SCRIPT)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    body = text[text.index(SEED_MARKER) + len(SEED_MARKER):]
    tree = ast.parse(body, filename=path)
    keep = [n for n in tree.body if isinstance(n, ast.Assign)
            or (isinstance(n, ast.FunctionDef) and n.name == "build_dataset")]
    ns = {"__name__": "seed_ray_train"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    with open(ctx.path("alpaca.json"), encoding="utf-8") as f:
        records = json.load(f)

    def load_dataset(name, split=None):
        rows = records
        if split and "[:" in split:
            rows = rows[:int(split.split("[:")[1].rstrip("]"))]
        return RowsDataset(rows)

    ns["load_dataset"] = load_dataset
    ns["MAX_SEQ_LEN"] = seq_len
    # --- the seed's train_func ---
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return ns["build_dataset"](tokenizer).with_format("torch")


def build_model(ctx):
    """Qwen2.5-0.5B's shape, random init (seeded), bf16, sdpa, on the device:
    the seed's from_pretrained(..., torch_dtype=bfloat16) without a download."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(**ctx.size["model"])
    with ctx.device:
        model = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
    model.config.use_cache = False
    return model


def seed_loader(ctx, ds):
    """The seed's DataLoader(shuffle=True, drop_last=True) after Ray's
    prepare_data_loader: a DistributedSampler (world size 1); batches moved to
    the device."""
    from torch.utils.data import DataLoader, DistributedSampler
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True)
    return DataLoader(ds, batch_size=ctx.size["batch"], sampler=sampler, drop_last=True)


def ferry_batches(ld):
    """A ferry Loader's batches with (shard, row, rows) of each, epoch after epoch."""
    while True:
        for where, b in zip(ld.schedule(), ld):
            yield b, where


def real_tokens_ferry(ld, where):
    shard, row, rows = where
    sf = ld.shards.shard(shard)
    return sum(length for r in range(rows) for _, _, length in sf.segments(row + r))


def run_path(ctx, name, setup):
    """One data path: set-up (data + model + optimizer), then the seed's step
    (forward with labels, backward, clip 1.0, AdamW, loss.item()) for
    steps; the time of each step and of the data part of it (next batch +
    to device). Returns (model, optimizer, result)."""
    import torch
    s = ctx.size
    dev = ctx.device
    gc.collect()
    if not ctx.smoke:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    ctx.sync()
    t0 = time.perf_counter()
    next_batch, to_dev, real, info = setup()
    t_data = time.perf_counter() - t0
    model = build_model(ctx)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=s["lr"])
    res = {"path": name, "setup_data_s": round(t_data, 3), **info, "steps": []}
    ctx.sec["paths"][name] = res  # flushed as it goes: a part killed mid-path keeps its steps
    for step in range(1, s["steps"] + 1):
        ts = time.perf_counter()
        batch, where = next_batch()
        b = to_dev(batch, dev)
        td = time.perf_counter() - ts
        out = model(**b)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = out.loss.item()
        ctx.sync()
        te = time.perf_counter()
        res["steps"].append({"step_s": te - ts, "data_s": td, "loss": loss, "real_tokens": real(batch, where),
                             "positions": int(batch["input_ids"].numel())})
        if step % 10 == 0:
            ctx.flush()
        if step == 1:
            res["first_step_s"] = round(te - t0, 3)
            res["first_loss"] = loss
            ctx.flush()
            log(f"{name}: first step {res['first_step_s']:.2f}s after the start (data set-up {t_data:.2f}s), "
                f"loss {loss:.4f}")
    steady = res["steps"][s["warmup"]:]
    tot = sum(x["step_s"] for x in steady)
    res.update({
        "steady_steps": len(steady),
        "steady_step_s_median": statistics.median(x["step_s"] for x in steady),
        "steady_step_s_mean": tot / len(steady),
        "real_tokens_per_s": sum(x["real_tokens"] for x in steady) / tot,
        "positions_per_s": sum(x["positions"] for x in steady) / tot,
        "padding_share": 1 - sum(x["real_tokens"] for x in steady) / sum(x["positions"] for x in steady),
        "data_share": sum(x["data_s"] for x in steady) / tot,
        "data_s_per_step_median": statistics.median(x["data_s"] for x in steady),
        "final_loss": res["steps"][-1]["loss"],
        "peak_gpu_memory_gib": None if ctx.smoke else round(torch.cuda.max_memory_allocated() / 2**30, 3),
    })
    if ctx.smoke:
        import resource
        res["peak_rss_gib_stub"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    log(f"{name}: steady {res['steady_step_s_median'] * 1e3:.1f} ms/step, {res['real_tokens_per_s']:.0f} real "
        f"tokens/s, data {100 * res['data_share']:.2f}% of a step, padding {100 * res['padding_share']:.0f}%"
        + ("" if ctx.smoke else f", peak {res['peak_gpu_memory_gib']:.2f} GiB"))
    return model, opt, res


def warm_up(ctx):
    """One training step of the same model on random ids before any path is
    timed: the process's one-time costs (CUDA context, cuBLAS handles, kernel
    selection, lazy imports) would otherwise fall on whichever path runs
    first."""
    import torch
    s = ctx.size
    t = time.perf_counter()
    model = build_model(ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=s["lr"])
    ids = torch.randint(0, model.config.vocab_size, (s["batch"], s["seq_len"]), device=ctx.device)
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    out.loss.item()
    ctx.sync()
    del model, opt, out
    ctx.sec["warm_up_s"] = round(time.perf_counter() - t, 3)
    log(f"warm-up step: {ctx.sec['warm_up_s']:.2f}s")


def part_train(ctx):
    import ferry
    s = ctx.size
    sec = ctx.begin("train", model={k: v for k, v in s["model"].items()}, dtype="bfloat16", attn="sdpa",
                    seq_len=s["seq_len"], batch=s["batch"], steps=s["steps"], warmup_steps=s["warmup"], lr=s["lr"],
                    paths={}, stub="CPU, a 2-layer model of Qwen2.5's vocabulary, 3 steps" if ctx.smoke else None)
    tok = qwen_base_dir(ctx)
    pad_dir, pack_dir = dataset_dir(ctx, "pad-copy"), dataset_dir(ctx, "pack")
    state = {}

    def seed_setup():
        ds = seed_build_dataset(ctx, tok, s["seq_len"])
        state["seed_ds"] = ds
        it = iter(seed_loader(ctx, ds))
        return (lambda: (next(it), None),
                lambda b, d: {k: v.to(d, non_blocking=True) for k, v in b.items()},
                lambda b, w: int(b["attention_mask"].sum()),
                {"data": "seed: build_dataset of the Ray Train seed (per-row tokenizer call), DataLoader + "
                         "DistributedSampler, world size 1", "rows": len(ds)})

    def ferry_setup(path, what):
        def setup():
            ld = ferry.Loader(path, s["batch"], rank=0, world_size=1, drop_last=True)
            state["loader"] = ld
            it = ferry_batches(ld)
            return (lambda: next(it), ferry.to_device, lambda b, w: real_tokens_ferry(ld, w),
                    {"data": what, "rows": ld.manifest.unique_rows})
        return setup

    warm_up(ctx)
    paths = [("seed", seed_setup),
             ("ferry pad", ferry_setup(pad_dir, "ferry.Loader over dataprep --mode pad --labels copy")),
             ("ferry pack", ferry_setup(pack_dir, "ferry.Loader over dataprep --mode pack"))]
    model = opt = None
    for name, setup in paths:
        del model, opt
        model = opt = None
        try:
            model, opt, res = run_path(ctx, name, setup)
            if name == "ferry pack":
                res["check_packing"] = ferry.check_packing(model)
            sec["paths"][name] = res
            ctx.check(f"train {name}: {s['steps']} steps, finite loss",
                      all(x["loss"] == x["loss"] and abs(x["loss"]) < 1e4 for x in res["steps"]),
                      detail=f"first loss {res['first_loss']:.4f}, last {res['final_loss']:.4f}")
        except Exception as e:
            sec["paths"][name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            ctx.check(f"train {name}: {s['steps']} steps, finite loss", False, detail=f"{type(e).__name__}: {e}")
        if name == "seed":
            first_loss_check(ctx, state.get("seed_ds"), pad_dir)
    seed = sec["paths"].get("seed", {})
    for p in sec["paths"].values():
        if "first_step_s" in p and "first_step_s" in seed:
            p["vs_seed"] = {"first_step": seed["first_step_s"] / p["first_step_s"],
                            "real_tokens_per_s": p["real_tokens_per_s"] / seed["real_tokens_per_s"]}
    ctx.flush()
    if model is not None and "error" not in sec["paths"].get("ferry pack", {"error": 1}):
        save_checkpoint(ctx, model, opt)
    sec["status"] = "done"
    ctx.flush()


def first_loss_check(ctx, ds, pad_dir):
    """ferry pad --labels copy vs the seed's rows: ferry's first batch, and
    the seed data set's rows of the same records (the shard's segments give
    each row's record), must be the same tensors, and the seed's step on
    them (a freshly built model, the seed's forward call) the same loss as
    ferry's (ferry's batch carries num_items_in_batch: sum / N instead of
    the mean)."""
    import ferry
    import torch
    name = "ferry pad --labels copy: the seed's first-step loss on the same rows"
    if ds is None:
        ctx.check(name, False, detail="the seed path did not build its data set")
        return
    try:
        ld = ferry.Loader(pad_dir, ctx.size["batch"], rank=0, world_size=1, drop_last=True)
        fb, (shard, row, rows) = next(ferry_batches(ld))
        sf = ld.shards.shard(shard)
        samples = [sf.segments(row + r)[0][0] for r in range(rows)]
        seed_rows = [ds[i] for i in samples]
        sb = {k: torch.stack([r[k] for r in seed_rows]) for k in ("input_ids", "attention_mask", "labels")}
        same = {k: bool(torch.equal(sb[k], fb[k].long())) for k in sb}
        model = build_model(ctx)
        with torch.no_grad():
            d = {k: v.to(ctx.device) for k, v in sb.items()}
            seed_loss = model(input_ids=d["input_ids"], attention_mask=d["attention_mask"], labels=d["labels"]).loss
            ferry_loss = model(**ferry.to_device(fb, ctx.device)).loss
            fb_mean = {k: v for k, v in fb.items() if k != "num_items_in_batch"}
            ferry_mean = model(**ferry.to_device(fb_mean, ctx.device)).loss
        seed_loss, ferry_loss, ferry_mean = seed_loss.item(), ferry_loss.item(), ferry_mean.item()
        rel = abs(seed_loss - ferry_loss) / abs(seed_loss)
        ctx.sec["first_loss"] = {"records": samples, "tensors_identical": same, "seed_loss": seed_loss,
                                 "ferry_loss": ferry_loss, "ferry_loss_without_num_items": ferry_mean,
                                 "rel_diff": rel, "tolerance_rel": LOSS_REL,
                                 "bitwise_without_num_items": ferry_mean == seed_loss}
        ld.close()
        del model
        ctx.check(name, all(same.values()) and rel <= LOSS_REL,
                  detail=f"records {samples}: seed {seed_loss:.6f}, ferry {ferry_loss:.6f} (rel diff {rel:.2g}); "
                         f"tensors identical {all(same.values())}")
    except Exception as e:
        ctx.check(name, False, detail=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])


def save_checkpoint(ctx, model, opt):
    """The trained (ferry pack) model and its optimizer as a sharded DCP
    checkpoint (ferry.dcp.save_train_state: get_state_dict + dcp.save, the
    GPU tensors written as they are), its config, and the reference logits
    of a probe batch for the checkpoint part."""
    import ferry.dcp
    import torch
    name = "DCP checkpoint written from the trained model"
    try:
        ck = ctx.path("ckpt")
        shutil.rmtree(ck, ignore_errors=True)
        os.makedirs(ck)
        ctx.sync()
        t = time.perf_counter()
        with_optim = ferry.dcp.save_train_state(os.path.join(ck, "dcp"), model, opt)
        ctx.sync()
        secs = time.perf_counter() - t
        size = sum(os.path.getsize(os.path.join(ck, "dcp", f)) for f in os.listdir(os.path.join(ck, "dcp")))
        model.config.save_pretrained(os.path.join(ck, "config"))
        model.eval()
        g = torch.Generator().manual_seed(1)
        probe = torch.randint(0, model.config.vocab_size, (2, min(128, ctx.size["seq_len"])), generator=g)
        with torch.no_grad():
            logits = model(input_ids=probe.to(ctx.device)).logits
        torch.save({"probe": probe, "logits": logits.cpu()}, os.path.join(ck, "reference.pt"))
        params_on = sorted({str(p.device) for p in model.parameters()})
        ctx.sec["checkpoint_save"] = {"seconds": round(secs, 3), "bytes": size, "with_optimizer": with_optim,
                                      "tensors_on": params_on, "files": sorted(os.listdir(os.path.join(ck, "dcp")))}
        ctx.check(name, True, detail=f"{size / 2**20:.1f} MiB in {secs:.2f}s from {', '.join(params_on)}"
                                     f"{' (model + optimizer)' if with_optim else ''}")
    except Exception as e:
        ctx.check(name, False, detail=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])


# ------------------------------------------------------------- checkpoint --

def part_checkpoint(ctx):
    import torch
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM
    sec = ctx.begin("checkpoint", stub="CPU: from_pretrained and the logits on CPU" if ctx.smoke else None)
    ck = ctx.path("ckpt")
    if not os.path.exists(os.path.join(ck, "reference.pt")):
        ctx.check("ckptmerge + from_pretrained: logits equal the trained model's", False,
                  detail="no checkpoint: the train part did not write one")
        sec["status"] = "done"
        ctx.flush()
        return
    merged = os.path.join(ck, "merged")
    cmd = [os.path.join(ctx.bin, "ckptmerge"), "--json", "--config-from", os.path.join(ck, "config"),
           os.path.join(ck, "dcp"), merged]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    sec["ckptmerge"] = {"cmd": " ".join(cmd[1:]), "seconds": round(time.perf_counter() - t, 3),
                        "exit": r.returncode, "stderr": r.stderr[-2000:]}
    with contextlib.suppress(ValueError):
        sec["ckptmerge"]["json"] = json.loads(r.stdout.strip().splitlines()[-1])
    ctx.check("ckptmerge", r.returncode == 0, detail=f"{sec['ckptmerge']['seconds']:.2f}s, exit {r.returncode}")
    if r.returncode != 0:
        sec["status"] = "done"
        ctx.flush()
        return
    ctx.sync()
    t = time.perf_counter()
    kw = {"device_map": str(ctx.device)} if importlib.util.find_spec("accelerate") else {}
    back = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.bfloat16, attn_implementation="sdpa", **kw)
    back.to(ctx.device).eval()
    sec["from_pretrained_device_map"] = kw.get("device_map")
    ctx.sync()
    sec["from_pretrained_s"] = round(time.perf_counter() - t, 3)
    ref = torch.load(os.path.join(ck, "reference.pt"))

    # The parameters: every tensor of the DCP checkpoint's model, read back
    # with torch's own DCP reader, against the loaded model's.
    md = dcp.FileSystemReader(os.path.join(ck, "dcp")).read_metadata()
    keys = sorted(k[len("model."):] for k in md.state_dict_metadata if k.startswith("model."))
    sd = back.state_dict()
    want = {"model": {k: torch.empty_like(sd[k]) for k in keys if k in sd}}
    dcp.load(want, checkpoint_id=os.path.join(ck, "dcp"))
    differ = [k for k, v in want["model"].items() if not torch.equal(v, sd[k])]
    missing = [k for k in keys if k not in sd]
    extra = [k for k in sd if k not in keys and not (k == "lm_head.weight" and back.config.tie_word_embeddings)]
    sec["params"] = {"checkpoint_tensors": len(keys), "differing": differ[:10], "missing_in_model": missing[:10],
                     "not_in_checkpoint": extra[:10], "tied_word_embeddings": back.config.tie_word_embeddings}
    ctx.check("from_pretrained(merged): parameters identical to the DCP checkpoint's",
              not differ and not missing and not extra, detail=f"{len(keys)} tensors, {len(differ)} differ")
    with torch.no_grad():
        logits = back(input_ids=ref["probe"].to(ctx.device)).logits.cpu()
    equal = bool(torch.equal(logits, ref["logits"]))
    diff = float((logits.float() - ref["logits"].float()).abs().max())
    sec["logits"] = {"identical": equal, "max_abs_diff": diff, "shape": list(logits.shape)}
    ctx.check("ckptmerge + from_pretrained: logits equal the trained model's", equal,
              detail=f"max |diff| {diff:g} on a {list(ref['probe'].shape)} probe")
    ctx.flush()
    load_pretrained_check(ctx, merged, back)
    sec["status"] = "done"
    ctx.flush()


def load_pretrained_check(ctx, model_dir, reference):
    """ferry.load_pretrained (base-model loading): to the device, against
    from_pretrained, bit-identical, timed: the model built from its config
    on the meta device, then load_pretrained(model, dir, dtype=, device=)
    materialises it on the device and reads the weights. Recorded as not
    available when the installed ferry has no load_pretrained."""
    import ferry
    import torch
    fn = getattr(ferry, "load_pretrained", None)
    name = "ferry.load_pretrained: bit-identical to from_pretrained"
    if fn is None:
        ctx.results.put("load_pretrained", {"status": "not available", "checks": [
            {"name": name, "pass": None,
             "detail": f"ferry {getattr(ferry, '__version__', '?')} has no load_pretrained"}]})
        log(f"check {name}: not available (ferry has no load_pretrained)")
        return
    sec = {"status": "running", "checks": []}
    try:
        from transformers import AutoModelForCausalLM
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(reference.config, dtype=reference.dtype)
        ctx.sync()
        t = time.perf_counter()
        fn(m, model_dir, dtype=reference.dtype, device=ctx.device)
        ctx.sync()
        sec["load_pretrained_s"] = round(time.perf_counter() - t, 3)
        sec["from_pretrained_s"] = ctx.sec.get("from_pretrained_s")
        a, b = m.state_dict(), reference.state_dict()
        differ = [k for k in b if k not in a or a[k].dtype != b[k].dtype or not torch.equal(a[k].to(b[k].device), b[k])]
        sec["differing"] = differ[:10]
        sec["checks"].append({"name": name, "pass": not differ, "detail": f"{len(b)} tensors, {len(differ)} differ; "
                              f"{sec['load_pretrained_s']:.2f}s vs from_pretrained {sec['from_pretrained_s']}s"})
    except Exception as e:
        sec["checks"].append({"name": name, "pass": False, "detail": f"{type(e).__name__}: {e}"})
    sec["status"] = "done"
    ctx.results.put("load_pretrained", sec)


# ------------------------------------------------------------ bookkeeping --

EXPECTED = ["prep", "packing", "train", "checkpoint"]


def part_mark(ctx):
    a = ctx.a
    sec = ctx.results.get(a.name) or {"checks": []}
    if a.if_running and sec.get("status") not in (None, "running"):
        return
    sec["status"] = a.status
    sec["note"] = a.note
    ctx.results.put(a.name, sec)


def fmt(x, unit="", nd=2):
    return "—" if x is None else f"{x:.{nd}f}{unit}"


def part_summary(ctx):
    data = ctx.results.load()
    parts = data.get("parts", {})
    checks = [(p, c) for p, sec in parts.items() for c in sec.get("checks", [])]
    failed = [f"{p}: {c['name']}" for p, c in checks if c["pass"] is False]
    unfinished = [f"{p}: {parts[p].get('status', 'missing')}" for p in EXPECTED
                  if parts.get(p, {}).get("status") != "done"]
    prep = parts.get("prep", {})
    data["run"] = {"date": now_iso(), "mode": "cpu-smoke (device parts stubbed)" if ctx.smoke else "gpu",
                   "elapsed_s": ctx.a.elapsed, "budget_s": ctx.a.budget, "machine": prep.get("machine"),
                   "versions": prep.get("versions"), "checks": len(checks),
                   "passed": sum(c["pass"] is True for _, c in checks),
                   "not_available": sum(c["pass"] is None for _, c in checks), "failed": failed,
                   "unfinished": unfinished, "ok": not failed and not unfinished}
    ctx.results.store(data)
    r = data["run"]
    m, v = r.get("machine") or {}, r.get("versions") or {}
    gpu = (m.get("gpu") or {}).get("name") or "CPU"
    L = [f"# ferry on {gpu}: {'PASS' if r['ok'] else 'FAIL'}", "",
         f"{r['date']}, {r['mode']}, {r['elapsed_s']} s of a {r['budget_s']} s budget; {m.get('cpus')} CPUs "
         f"({m.get('cpu')}); torch {v.get('torch')}, transformers {v.get('transformers')}, "
         f"ferry {v.get('ferry')} ({str((v.get('prepared') or {}).get('commit'))[:12]})", "",
         f"{r['passed']} of {r['checks']} checks passed, {r['not_available']} not available"
         + (f"; FAILED: {'; '.join(failed)}" if failed else "")
         + (f"; unfinished: {'; '.join(unfinished)}" if unfinished else ""), ""]
    tr = parts.get("train", {})
    if tr.get("paths"):
        shape = "a toy model of Qwen2.5's vocabulary" if ctx.smoke else "Qwen2.5-0.5B's shape"
        L += [f"## Training: {shape}, random init, bf16, sdpa, {tr.get('batch')} x {tr.get('seq_len')}, "
              f"{tr.get('steps')} steps (steady = after {tr.get('warmup_steps')})", "",
              "| data path | dataprep s (once, before) | first step s | steady ms/step | real tokens/s | vs seed "
              "| data share | padding | peak GPU GiB | last loss |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        dp = prep.get("dataprep") or {}
        for n, p in tr["paths"].items():
            if "error" in p:
                L.append(f"| {n} | | error: {p['error'][:80]} | | | | | | | |")
                continue
            if "steady_step_s_median" not in p:
                L.append(f"| {n} | | unfinished after {len(p.get('steps', []))} steps | | | | | | | |")
                continue
            d = {"ferry pad": dp.get("pad-copy"), "ferry pack": dp.get("pack")}.get(n) or {}
            L.append(f"| {n} | {fmt(d.get('seconds'))} | {fmt(p.get('first_step_s'))} | "
                     f"{fmt(p['steady_step_s_median'] * 1e3, nd=1)} | "
                     f"{p['real_tokens_per_s']:,.0f} | {fmt((p.get('vs_seed') or {}).get('real_tokens_per_s'), 'x')}"
                     f" | {100 * p['data_share']:.2f}% | {100 * p['padding_share']:.0f}% | "
                     f"{fmt(p.get('peak_gpu_memory_gib'))} | {p['final_loss']:.3f} |")
        fl = tr.get("first_loss")
        if fl:
            L += ["", f"First-step loss on the same {len(fl['records'])} rows: seed {fl['seed_loss']:.6f}, "
                      f"ferry pad --labels copy {fl['ferry_loss']:.6f} (rel diff {fl['rel_diff']:.2g})"]
        L.append("")
    pk = parts.get("packing", {})
    if pk.get("results"):
        L += ["## Packing isolation (bf16; tolerance: |packed - alone| <= "
              f"{TOL_ABS} + {TOL_REL} x max |logit|)", "",
              "| model | attention | variant | documents | max abs diff | tolerance | outcome |",
              "|---|---|---|---:|---:|---:|---|"]
        for x in pk["results"]:
            L.append(f"| {x['arch']} | {x['attn']} | {x['variant']} | {x.get('documents', '—')} | "
                     f"{fmt(x.get('max_abs_diff'), nd=4)} | {fmt(x.get('tolerance'), nd=4)} | {x['outcome']}"
                     f"{' (' + x['error'][:90] + ')' if x.get('error') else ''} |")
        if pk.get("absent"):
            L.append(f"\nAbsent here: {', '.join(pk['absent'])}.")
        L.append("")
    ck = parts.get("checkpoint", {})
    save = tr.get("checkpoint_save") or {}
    if save or ck.get("ckptmerge"):
        L += ["## Checkpoint", "",
              f"DCP save {fmt(save.get('seconds'), ' s')} ({(save.get('bytes') or 0) / 2**20:.0f} MiB), ckptmerge "
              f"{fmt((ck.get('ckptmerge') or {}).get('seconds'), ' s')}, "
              f"from_pretrained {fmt(ck.get('from_pretrained_s'), ' s')}; "
              f"logits identical: {(ck.get('logits') or {}).get('identical')}", ""]
    lp = parts.get("load_pretrained", {})
    L += [f"load_pretrained: {lp.get('status', 'not run')}", "", "## Checks", ""]
    for p, c in checks:
        mark = {True: "pass", False: "FAIL", None: "n/a"}[c["pass"]]
        L.append(f"- {mark}: {p}: {c['name']}{' - ' + str(c['detail']) if c.get('detail') else ''}")
    for p in EXPECTED + ["load_pretrained"]:
        st = parts.get(p, {})
        if st.get("stub"):
            L.append(f"- stub: {p}: {st['stub']}")
    text = "\n".join(L) + "\n"
    with open(os.path.join(os.path.dirname(ctx.results.path), "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if r["ok"] else 1


PARTS = {"prep": part_prep, "packing": part_packing, "train": part_train, "checkpoint": part_checkpoint,
         "mark": part_mark, "summary": part_summary}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=sorted(PARTS))
    ap.add_argument("--results", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--prepared", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--name", help="mark: the part to mark")
    ap.add_argument("--status", help="mark: its status")
    ap.add_argument("--note", default=None)
    ap.add_argument("--if-running", action="store_true", help="mark: only when the part did not finish its section")
    ap.add_argument("--elapsed", type=int, default=None)
    ap.add_argument("--budget", type=int, default=None)
    a = ap.parse_args()
    ctx = Ctx(a)
    if a.part in ("mark", "summary"):
        return PARTS[a.part](ctx) or 0
    try:
        PARTS[a.part](ctx)
    except Exception as e:
        traceback.print_exc()
        if ctx.sec is not None:
            ctx.sec["status"] = "failed"
            ctx.sec["error"] = f"{type(e).__name__}: {e}"
            ctx.sec["traceback"] = traceback.format_exc()[-4000:]
            ctx.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
