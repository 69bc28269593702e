"""ferry.load_pretrained with real torch, transformers and safetensors.

Distributed (one torchrun launch of dcp_workers/load_worker.py on 3 ranks,
gloo, CPU): tiny random-init Llama (untied) and Qwen2 (tied) saved by
save_pretrained in several shard files, loaded by ferry into FSDP2, FSDP1
(use_orig_params=True) and unsharded (DDP) models and compared bit for bit,
every parameter and buffer gathered whole, with from_pretrained followed by
the same wrapping, before and after one AdamW step. A one-element change is
made on purpose to show the comparison catches it. Under FSDP the ranks
together read each tensor's bytes exactly once.

One process: bad checkpoints (truncated file, offsets past the end, missing
and unexpected tensors, shape and dtype mismatches) each give an error
naming the file and the tensor, before the model is touched; a random
mutation test of the header parser; dtype casts as from_pretrained does.
"""

import json
import math
import os
import random
import signal
import struct
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import ferry
from ferry.load import parse_header, read_headers
from helpers import TESTS, Daemon, versitygw

WORKERS = os.path.join(TESTS, "dcp_workers")
sys.path.insert(0, WORKERS)
import tiny_models  # noqa: E402

sys.path.remove(WORKERS)

RANKS = 3
ARCHS = ("llama", "qwen2")  # untied, tied
WRAPS = ("fsdp2", "fsdp1", "none")
CASES = [f"{a}/{w}" for a in ARCHS for w in WRAPS] + ["llama/fsdp1~bfloat16", "qwen2/fsdp2~bfloat16"]
DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2}


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_models(root, archs=ARCHS):
    """Tiny models saved by save_pretrained in several shard files; returns
    {arch: total tensor bytes}."""
    out = {}
    for i, arch in enumerate(archs):
        torch.manual_seed(100 + i)
        m = tiny_models.build(arch)
        m.save_pretrained(root / arch, max_shard_size="100KB")
        assert (root / arch / "model.safetensors.index.json").exists()
        assert len([f for f in os.listdir(root / arch) if f.endswith(".safetensors")]) >= 4
        total = 0
        for f in os.listdir(root / arch):
            if f.endswith(".safetensors"):
                with safe_open(str(root / arch / f), "pt") as st:
                    for k in st.keys():
                        t = st.get_slice(k)
                        total += math.prod(t.get_shape()) * DTYPE_SIZE[t.get_dtype()]
        out[arch] = total
    return out


def torchrun(models, out, extra=(), env=None):
    env = dict(os.environ if env is None else env, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([WORKERS] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", os.path.join(WORKERS, "load_worker.py"), "--models", str(models),
           "--out", str(out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(out))
    if r.returncode != 0:
        pytest.fail(f"load_worker exited {r.returncode}\n--- stderr\n{r.stderr[-6000:]}")


def results(out, case):
    case, _, via = case.partition("@")
    case, _, dt = case.partition("~")
    arch, how = case.split("/")
    name = f"{arch}-{how}" + (f"-{dt}" if dt else "") + (f"-{via}" if via else "")
    got = []
    for rank in range(RANKS):
        p = out / f"{name}.{rank}.json"
        assert p.exists(), f"{case}: rank {rank} wrote no result"
        got.append(json.loads(p.read_text()))
    return got


def check_case(out, case, total):
    rs = results(out, case)
    for rank, r in enumerate(rs):
        assert "error" not in r, f"{case} rank {rank}: {r['error']}\n{r.get('traceback', '')}"
        assert r["mismatches"] == [], f"{case} rank {rank}: loaded model differs from from_pretrained"
        assert r["mismatches_after_step"] == [], f"{case} rank {rank}: differs after one AdamW step"
        assert r["meta"] == [], f"{case} rank {rank}: tensors left on meta: {r['meta']}"
        assert r["control_caught"], f"{case} rank {rank}: the comparison missed a changed element"
        assert r["tied"] == tiny_models.CONFIGS[case.split("/")[0]]["tie_word_embeddings"], case
    read = [r["bytes"] for r in rs]
    if "/none" in case:
        assert read == [total] * RANKS, read
    else:
        # each rank its own part: together every byte once
        assert sum(read) == total, (read, total)
        assert max(read) < total * 0.5, read


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    totals = save_models(models)
    out = tmp_path_factory.mktemp("load-out")
    torchrun(models, out, ["--cases", ",".join(CASES)])
    return out, totals


@pytest.mark.parametrize("case", CASES)
def test_bit_identical_to_from_pretrained(loaded, case):
    out, totals = loaded
    check_case(out, case, totals[case.split("/")[0]])


# -- through ferry-serve, from a local directory and from S3 -------------------------------
SERVE_CASES = ["llama/fsdp2@serve", "qwen2/fsdp1@serve", "qwen2/fsdp2@s3", "llama/none@s3"]


@pytest.fixture(scope="module")
def s3_models(tmp_path_factory):
    """A real S3 server (versitygw, POSIX back end, as the Go tests use) on
    127.0.0.1: bucket "ferry" holds the tiny models under models/."""
    root = tmp_path_factory.mktemp("s3")
    (root / "ferry").mkdir()
    totals = save_models(root / "ferry" / "models")
    with versitygw(root) as env:
        yield dict(env=env, models=root / "ferry" / "models", totals=totals)


def shm_names():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.fixture(scope="module")
def served(serve_bin, s3_models, tmp_path_factory):
    """One torchrun launch of SERVE_CASES through one ferry-serve (model
    files only) that reads the local models and the S3 ones."""
    out = tmp_path_factory.mktemp("load-serve")
    sock = str(out / "ferry.sock")
    before = shm_names()
    env = dict(os.environ, **s3_models["env"])
    d = Daemon(serve_bin, None, sock, ["--file-keep", "120s"], env=env)
    try:
        torchrun(s3_models["models"], out, ["--cases", ",".join(SERVE_CASES), "--serve", sock, "--s3",
                                            "s3://ferry/models"], env=env)
    finally:
        d.kill(signal.SIGTERM)
    return out, s3_models, d.output(), before


@pytest.mark.parametrize("case", SERVE_CASES)
def test_bit_identical_through_serve_and_s3(served, case):
    out, s3m, _, _ = served
    check_case(out, case, s3m["totals"][case.split("/")[0]])


def test_serve_reads_each_file_once_per_node(served):
    """The node's ranks asked for every file; the daemon read each once (its
    log line per read), and left nothing in /dev/shm."""
    _, s3m, log, before = served
    for arch in ARCHS:
        files = sorted(f for f in os.listdir(s3m["models"] / arch) if f.endswith(".safetensors"))
        for where in (str(s3m["models"] / arch), f"s3://ferry/models/{arch}"):
            for f in files:
                n = log.count(f"model file {where}/{f}: ")
                used = any(c.startswith(arch) and (c.endswith("@s3") == where.startswith("s3://"))
                           for c in SERVE_CASES)
                assert n == (1 if used else 0), f"{where}/{f} read {n} times:\n{log[-3000:]}"
    assert shm_names() == before


def test_daemon_killed_mid_load(serve_bin, saved, tmp_path):
    """A daemon killed after the headers were read: the next file gives
    DaemonGone naming the socket and the file, and no model is returned."""
    from ferry.weights_client import ServeSource

    sock = str(tmp_path / "s.sock")
    d = Daemon(serve_bin, None, sock)
    src = ServeSource(str(saved / "llama"), sock)
    try:
        tensors = read_headers(src)
        assert len(tensors) == len(reference(saved / "llama").state_dict())
        d.kill()
        f = sorted({t.file for t in tensors.values()})[0]
        with pytest.raises(ferry.DaemonGone, match=f"closed the connection while loading .*{f}.*killed"):
            src.acquire(f)
    finally:
        src.close()
        d.kill()
    with pytest.raises(ferry.DaemonGone, match="no ferry-serve at"):
        ferry.load_pretrained(meta_model("llama"), saved / "llama", serve=sock)


def test_s3_needs_serve():
    with pytest.raises(ferry.LoadError, match="serve=SOCKET"):
        ferry.load_pretrained(meta_model("llama"), "s3://bucket/model")


# -- one process -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("one")
    save_models(root)
    return root


def meta_model(arch, dtype=torch.float32):
    import transformers

    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(tiny_models.config(arch), dtype=dtype)


def reference(path, dtype=torch.float32):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")


def assert_same(ref, model):
    a, b = dict(ref.named_parameters()), dict(model.named_parameters())
    a.update(ref.named_buffers())
    b.update(model.named_buffers())
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert torch.equal(a[k].view(-1).view(torch.uint8), b[k].view(-1).view(torch.uint8)), k


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_unsharded_casts_as_from_pretrained(saved, arch, dtype):
    model = meta_model(arch, dtype)
    assert ferry.load_pretrained(model, saved / arch, dtype=dtype) is model
    assert_same(reference(saved / arch, dtype), model)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == (arch == "qwen2")


def test_dtype_converts_an_unsharded_model(saved):
    model = meta_model("llama", torch.float32)
    ferry.load_pretrained(model, saved / "llama", dtype=torch.bfloat16)
    assert_same(reference(saved / "llama", torch.bfloat16), model)


def test_single_file_and_materialised_model(saved, tmp_path):
    ref = reference(saved / "qwen2")
    ref.save_pretrained(tmp_path / "one")  # one model.safetensors
    assert (tmp_path / "one" / "model.safetensors").exists()
    model = tiny_models.build("qwen2")  # materialised on CPU, random
    stats = {}
    ferry.load_pretrained(model, tmp_path / "one", stats=stats)
    assert_same(ref, model)
    assert stats["files"] == 1 and stats["tensors"] == len(ref.state_dict()) - 1  # lm_head is tied


def write_st(path, tensors, mutate=None):
    save_file(tensors, str(path), metadata={"format": "pt"})
    if mutate:
        b = bytearray(path.read_bytes())
        path.write_bytes(bytes(mutate(b)))


def tiny_ckpt(tmp_path, arch="llama"):
    """A model directory with one model.safetensors; returns (dir, state dict)."""
    ref = reference_from_config(arch)
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    if ref.config.tie_word_embeddings:
        del sd["lm_head.weight"]
    d = tmp_path / "ckpt"
    d.mkdir()
    return d, sd


def reference_from_config(arch):
    torch.manual_seed(5)
    return tiny_models.build(arch)


def header_len(b):
    return 8 + struct.unpack_from("<Q", b)[0]


def untouched(model, before):
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} was written before the error"


BAD = {
    # name: (how to spoil the state dict or the file, error class, words the message must hold)
    "truncated": (lambda sd: (sd, lambda b: b[:len(b) - 100]), ferry.CheckpointError,
                  ["model.safetensors", "past the end of the file", "truncated"]),
    "offsets-past-file": (lambda sd: (sd, None), ferry.CheckpointError, ["model.safetensors", "past the end"]),
    "missing": (lambda sd: ({k: v for k, v in sd.items() if k != "model.layers.1.mlp.up_proj.weight"}, None),
                ferry.LoadError, ["missing", "model.layers.1.mlp.up_proj.weight"]),
    "unexpected": (lambda sd: (dict(sd, **{"model.extra.weight": torch.zeros(3)}), None), ferry.LoadError,
                   ["unexpected", "model.extra.weight"]),
    "shape": (lambda sd: (dict(sd, **{"model.layers.0.self_attn.k_proj.weight": torch.zeros(31, 64)}), None),
              ferry.LoadError, ["model.safetensors", "model.layers.0.self_attn.k_proj.weight", "[31, 64]",
                                "[32, 64]"]),
    "dtype": (lambda sd: (dict(sd, **{"model.norm.weight": torch.zeros(64, dtype=torch.int32)}), None),
              ferry.LoadError, ["model.safetensors", "model.norm.weight", "I32"]),
}


def grow_offsets(b):
    """Make the last tensor's end offset point past the file (header rewritten
    with the same length)."""
    n = header_len(b)
    h = json.loads(bytes(b[8:n]))
    last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][1])
    s, e = h[last]["data_offsets"]
    h[last]["data_offsets"] = [s + 4096, e + 4096]
    text = json.dumps(h, separators=(",", ":")).encode()
    assert len(text) <= n - 8
    return b[:8] + text.ljust(n - 8) + b[n:]


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_checkpoint_names_file_and_tensor(tmp_path, what):
    d, sd = tiny_ckpt(tmp_path)
    spoil, err, words = BAD[what]
    sd, mutate = spoil(sd)
    if what == "offsets-past-file":
        mutate = grow_offsets
    write_st(d / "model.safetensors", sd, mutate)
    model = tiny_models.build("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(err) as e:
        ferry.load_pretrained(model, d)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{what}: {w!r} not in {msg!r}"
    untouched(model, before)


def test_missing_tensor_named_by_index(saved, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(saved / "llama", d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = "model.layers.0.mlp.down_proj.weight"
    f = index["weight_map"][name]
    from safetensors.torch import load_file

    sd = load_file(str(d / f))
    del sd[name]
    save_file(sd, str(d / f), metadata={"format": "pt"})
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.load_pretrained(meta_model("llama"), d)
    assert name in str(e.value) and f in str(e.value)


def test_not_a_model_directory(tmp_path):
    with pytest.raises(ferry.CheckpointError, match="neither model.safetensors.index.json nor model.safetensors"):
        ferry.load_pretrained(meta_model("llama"), tmp_path)


def test_header_parser_random_mutations(tmp_path):
    """A deterministic mutation test of parse_header (hypothesis is not in
    the venv): a valid header with bytes flipped, inserted, deleted or cut,
    and its JSON with fields swapped for odd values, must parse into
    tensors that lie inside the file, or raise CheckpointError; nothing
    else."""
    write_st(tmp_path / "x.safetensors", {"a": torch.zeros(3, 5), "b": torch.ones(7, dtype=torch.bfloat16),
                                          "c": torch.zeros(0, 4, dtype=torch.int8)})
    good = bytearray((tmp_path / "x.safetensors").read_bytes())
    n = header_len(good)
    rnd = random.Random(28)
    odd = [None, -1, 1 << 70, "x", [], {}, [1], [5, 2], [0, 1 << 64], 1.5, True, "F32", "F99", [3, -5], [2, 3]]
    h = json.loads(bytes(good[8:n]))
    accepted = 0
    for i in range(4000):
        b = bytearray(good)
        op = rnd.randrange(6)
        if op == 0:
            for _ in range(rnd.randint(1, 4)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
        elif op == 1:
            b = b[:rnd.randrange(len(b))]
        elif op == 2:
            j = rnd.randrange(8, n)
            b[j:j] = bytes([rnd.randrange(32, 127)])
        elif op == 3:
            struct.pack_into("<Q", b, 0, rnd.choice([0, 1, n - 9, n - 7, len(b), 1 << 40, (1 << 64) - 1]))
        else:
            hh = json.loads(json.dumps(h))
            k = rnd.choice(["a", "b", "c", "__metadata__"])
            f = rnd.choice(["dtype", "shape", "data_offsets"]) if k != "__metadata__" else None
            if f:
                hh[k][f] = rnd.choice(odd)
            else:
                hh[k] = rnd.choice(odd)
            text = json.dumps(hh).encode()
            b = bytearray(struct.pack("<Q", len(text)) + text + good[n:])
        try:
            hl, got = parse_header(b, len(b), f"case{i}")
        except ferry.CheckpointError as e:
            assert f"case{i}" in str(e)
            continue
        accepted += 1
        for t in got.values():
            assert hl <= t.begin and t.begin + t.nbytes <= len(b)
            numel = 1
            for s in t.shape:
                numel *= s
            assert numel * t.itemsize == t.nbytes
    assert 0 < accepted < 4000
