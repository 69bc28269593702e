"""End to end on CPU: tiny Alpaca -> dataprep --ranks 2 -> torchrun (2 ranks,
gloo, DDP, the examples/torchrun-fsdp script) for 20 steps, once through the
direct loader and once through ferry-serve (same losses, same final weights)
-> sharded DCP checkpoints -> ckptmerge -> safetensors that load back into
the model bit for bit; then a restart on 1 rank resumes from the checkpoint.

Marked e2e (``-m "not e2e"`` leaves it out). It never skips: a missing or
unbuildable dataprep/ckptmerge is a failure that says so."""

import json
import os
import signal
import socket
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from helpers import REPO, Daemon, build_go_tool

ALPACA = os.path.join(REPO, "testdata", "alpaca", "alpaca_tiny.json")
TOKENIZER = os.path.join(REPO, "testdata", "tokenizers", "qwen2.5")
EXAMPLE = os.path.join(REPO, "examples", "torchrun-fsdp", "train.py")
# torchrun, as the venv's torch installs it (the same module the `torchrun`
# script runs), with the interpreter that runs the tests.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def tool(pkg, bindir):
    try:
        return build_go_tool(pkg, bindir)
    except RuntimeError as e:
        pytest.fail(f"e2e needs ./{pkg} (built with `go build -o bin/ ./cmd/...`): {e}")


def run(cmd, cwd=None, timeout=600, env=None):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n"
                    f"--- stderr\n{r.stderr[-4000:]}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = SAFETENSORS_DTYPES[info["dtype"]]
        out[name] = torch.from_numpy(np.frombuffer(data[base + a:base + b], dtype=dt).reshape(info["shape"]).copy())
    return out


def merged_tensors(outdir):
    idx = os.path.join(outdir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(outdir, fn)))
    return tensors


def torchrun(nproc, args, cwd):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [*TORCHRUN, f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", EXAMPLE, *args]
    return run(cmd, cwd=cwd, env=env)


def check_merged(ckptmerge, ckpt, merged, ref):
    """ckptmerge the DCP checkpoint; the safetensors must load into the
    example's model with parameters identical to the job's final ones."""
    run([ckptmerge, str(ckpt), str(merged)])
    tensors = merged_tensors(str(merged))
    want = torch.load(ref)
    assert sorted(tensors) == sorted(want)
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    try:
        import train as example
    finally:
        sys.path.pop(0)
    model = example.TinyLM(tensors["embed.weight"].shape[0])
    model.load_state_dict(tensors, strict=True)
    for k, v in model.state_dict().items():
        assert v.dtype == want[k].dtype and torch.equal(v, want[k]), k
    return want


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.e2e
def test_torchrun_example_end_to_end(serve_bin, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    dataprep = tool("cmd/dataprep", str(bindir))
    ckptmerge = tool("cmd/ckptmerge", str(bindir))

    data = tmp_path / "data"
    run([dataprep, "--input", ALPACA, "--tokenizer", TOKENIZER, "--eos", "<|endoftext|>", "--seq-len", "64", "--ranks", "2",
         "--out", str(data)])
    with open(data / "manifest.json") as f:
        m = json.load(f)
    assert m["ranks"] == 2 and m["seq_len"] == 64 and m["mode"] == "pad"

    def train(feed, nproc, steps, extra=()):
        out = tmp_path / f"out-{feed}"
        metrics = tmp_path / f"metrics-{feed}.jsonl"
        args = ["--tiny", "--data-dir", str(data), "--output-dir", str(out), "--batch-size", "2", "--grad-accum",
                "1", "--lr", "0.01", "--metrics-file", str(metrics), "--max-steps", str(steps), *extra]
        return torchrun(nproc, args, tmp_path), out, metrics

    # 1. The direct loader: each rank maps its shard.
    r, out, metrics = train("direct", 2, 20, ["--save-reference", str(tmp_path / "final-direct.pt")])
    assert "World size=2" in r.stdout and "feed=Loader (mapped shards)" in r.stdout
    direct = read_metrics(metrics)
    losses = [x["loss"] for x in direct]
    assert [x["step"] for x in direct] == list(range(1, 21))
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < first - 0.5, f"loss did not decrease: {losses}"
    ckpt = out / "dcp" / "step-00000020"
    assert (ckpt / ".metadata").exists(), "no DCP checkpoint written"
    assert any(n.endswith(".distcp") for n in os.listdir(ckpt))
    with open(out / "dcp" / "latest.json") as f:
        assert json.load(f)["step"] == 20
    want = check_merged(ckptmerge, ckpt, tmp_path / "hf-direct", tmp_path / "final-direct.pt")

    # 2. Through ferry-serve (one daemon for the node's two ranks): the same
    # batches in the same order, so the same losses and the same weights.
    sock = str(tmp_path / "ferry.sock")
    d = Daemon(serve_bin, str(data), sock, ["--ranks", "0-1"])
    try:
        r, out_s, metrics_s = train("serve", 2, 20, ["--serve", sock, "--save-reference",
                                                     str(tmp_path / "final-serve.pt")])
    finally:
        code = d.kill(signal.SIGTERM)
    assert code == 0, f"ferry-serve exited {code} on SIGTERM:\n{d.output()}"
    assert f"feed=ServeLoader (ferry-serve at {sock})" in r.stdout
    served = read_metrics(metrics_s)
    assert [x["step"] for x in served] == list(range(1, 21))
    assert [x["loss"] for x in served] == losses, "ferry-serve fed other batches than the direct loader"
    ckpt_s = out_s / "dcp" / "step-00000020"
    assert (ckpt_s / ".metadata").exists(), "no DCP checkpoint written (serve run)"
    with open(ckpt_s / "ferry-train-state.json") as f:
        st = json.load(f)["loader"]
    assert st["consumed_blocks"] == 20 * 2 and st["world_size"] == 2
    got = check_merged(ckptmerge, ckpt_s, tmp_path / "hf-serve", tmp_path / "final-serve.pt")
    for k in want:
        assert torch.equal(got[k], want[k]), f"{k}: served run ended with other weights than the direct run"

    # 3. Restart the direct run on one rank: resumes from step 20 with the
    # saved sample order (asked for: a new job does not resume by itself).
    r, _, _ = train("direct", 1, 23, ["--resume"])
    assert "resumed from" in r.stdout and "at step 20 (saved with world size 2, now 1;" in r.stdout
    assert [x["step"] for x in read_metrics(metrics)] == list(range(1, 21)) + [21, 22, 23]


@pytest.mark.e2e
@pytest.mark.parametrize("feed", ["direct", "serve"])
def test_ray_example_worker_mode_on_cpu(make_shards, serve_bin, tmp_path, feed):
    """examples/ray-train's train_func without Ray (not installed here):
    2 ranks under torchrun, ferry.Loader (direct, or --serve through the
    ferry-serve that the driver's start_ferry_serve starts), DDP on gloo,
    sharded DCP save."""
    data = make_shards(ranks=2, rows=64, seq_len=32)
    ckpt = tmp_path / "dcp"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    example = os.path.join(REPO, "examples", "ray-train", "train_ray.py")
    extra, daemon = [], None
    if feed == "serve":
        sys.path.insert(0, os.path.dirname(example))
        try:
            import train_ray
        finally:
            sys.path.pop(0)
        sock = str(tmp_path / "ferry.sock")
        open(sock, "w").close()  # a stale file where the socket goes: replaced
        daemon = train_ray.start_ferry_serve(types.SimpleNamespace(serve=sock, ferry_serve=serve_bin, data_dir=data))
        extra = ["--serve", sock]
    try:
        r = run([*TORCHRUN, "--nproc_per_node=2", "--master_addr=127.0.0.1",
                 f"--master_port={free_port()}", example, "--worker", "--cpu", "--data-dir", data, "--checkpoint-dir",
                 str(ckpt), "--batch-size", "2", "--max-steps", "6", *extra], cwd=tmp_path, env=env)
    finally:
        if daemon is not None:
            daemon.terminate()
            assert daemon.wait(timeout=30) == 0, "ferry-serve did not stop cleanly on SIGTERM"
    want = f"ferry feed: ServeLoader, ferry-serve at {sock}," if feed == "serve" else "ferry feed: Loader, direct"
    assert want in r.stdout
    steps = [json.loads(line)["step"] for line in r.stdout.splitlines() if line.startswith("{")]
    assert steps == [1, 2, 3, 4, 5, 6]
    with open(ckpt / "latest.json") as f:
        name = json.load(f)["checkpoint"]
    assert name == "step-00000006" and (ckpt / name / ".metadata").exists()
    with open(ckpt / name / "ferry-train-state.json") as f:
        st = json.load(f)["loader"]
    assert st["consumed_blocks"] == 6 * 2 and st["world_size"] == 2
