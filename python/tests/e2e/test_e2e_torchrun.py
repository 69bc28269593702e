"""End to end on CPU: tiny Alpaca -> dataprep --ranks 2 -> torchrun (2 ranks,
gloo, DDP, the examples/torchrun-fsdp script) for 20 steps, once through the
direct loader and once through ferry-serve (same losses, same final weights)
-> sharded DCP checkpoints -> ckptmerge -> safetensors that load back into
the model bit for bit; then a restart on 1 rank resumes from the checkpoint.

And the seed's own path on CPU (``train.py --cpu``): a tiny random-init
LlamaForCausalLM sized for the Llama-3.1 tokenizer, loaded with
from_pretrained from a local directory, the seed's FSDP1 wrapping, MLflow to
a local file store, killed with SIGKILL mid-run and resumed, ckptmerge ->
from_pretrained(output_dir) with the trained model's logits.

Marked e2e (``-m "not e2e"`` leaves it out). It never skips: a missing or
unbuildable dataprep/ckptmerge is a failure that says so."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import types
import zlib

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


LLAMA_TOKENIZER = os.path.join(REPO, "testdata", "tokenizers", "llama3.1")


def tiny_llama_dir(path):
    """A random-init LlamaForCausalLM sized for the Llama-3.1 tokenizer
    (vocab = the tokenizer's size; hidden 64, 2 layers), saved with
    save_pretrained next to the tokenizer: what train.py loads with
    from_pretrained, as the seed loads meta-llama/Llama-3.1-8B."""
    import transformers

    os.makedirs(path)
    with open(os.path.join(path, "tokenizer.json"), "wb") as f:
        subprocess.run(["zstd", "-dc", os.path.join(LLAMA_TOKENIZER, "tokenizer.json.zst")], stdout=f, check=True)
    shutil.copy(os.path.join(LLAMA_TOKENIZER, "tokenizer_config.json"), path)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return tok


def process_tree(pid):
    import psutil

    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def kill_job(proc):
    """SIGKILL torchrun and its workers (torchrun starts each worker in a
    session of its own, so a process-group kill would miss them)."""
    for p in process_tree(proc.pid):
        try:
            p.send_signal(signal.SIGKILL)
        except Exception:
            pass
    proc.wait(timeout=60)


def read_jsonl(path):
    """Complete JSON lines (a SIGKILL may leave a partial last one)."""
    out = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                out.append(json.loads(line))
    return out


def expected_order(data, ranks, batch_size, steps, seed=0):
    """Per rank, the first `steps` batches a fresh loader yields: each row's
    source record (dataprep's segments) and the crc32 of its input_ids."""
    import ferry

    want = []
    for r in range(ranks):
        loader = ferry.Loader(str(data), batch_size, rank=r, world_size=ranks, drop_last=True, seed=seed,
                              num_items_in_batch=False)
        rows = []
        for j, batch in enumerate(loader):
            if j == steps:
                break
            ids = batch["input_ids"].numpy()
            rows.append({"crc": [zlib.crc32(ids[i].tobytes()) for i in range(len(ids))]})
        loader.close()
        want.append(rows)
    # Source records of every row of every shard, keyed by input_ids crc.
    shards = ferry.ShardSet(str(data))
    by_crc = {}
    for r in range(ranks):
        sf = shards.shard(r)
        for row in range(shards.manifest.rows_per_rank):
            ids, _, _, _ = sf.view(row, 1)
            by_crc.setdefault(zlib.crc32(np.asarray(ids[0]).tobytes()), set()).add(
                tuple(s for s, _, _ in sf.segments(row)))
    shards.close()
    return want, by_crc


# Both precision branches of the example run on every machine, forced with
# its --mixed-precision flag (its "auto" picks one by the CPU's features).
# The merged model keeps the dtype the job trained in: the seed loads bf16
# weights and trains them under bf16 mixed precision, so its merged model
# (tensors and config.json) is bf16; an fp32 run gives an fp32 model.
@pytest.mark.e2e
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_torchrun_example_fsdp_tiny_llama_kill_and_resume(tmp_path, precision):
    import mlflow
    import transformers

    t0 = time.time()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    dataprep = tool("cmd/dataprep", str(bindir))
    ckptmerge = tool("cmd/ckptmerge", str(bindir))
    model_dir = tmp_path / "tiny-llama"
    tok = tiny_llama_dir(str(model_dir))
    assert len(tok) == 128256

    data = tmp_path / "data"
    run([dataprep, "--input", ALPACA, "--tokenizer", str(model_dir), "--seq-len", "64", "--labels", "mask-pad",
         "--ranks", "2", "--quiet", "--out", str(data)])

    # MLflow: a local file store; the run exists before the job, as the
    # platform creates it and injects MLFLOW_RUN_ID (the seed's gate).
    uri = f"file:{tmp_path / 'mlruns'}"
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3.x keeps file stores behind this switch
    client = mlflow.MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("ferry-e2e")).info.run_id

    out, samples, metrics = tmp_path / "out", tmp_path / "samples", tmp_path / "metrics.jsonl"
    ckpt_dir = out / "dcp"
    steps, save_every, B = 20, 10, 2
    env = dict(os.environ, OMP_NUM_THREADS="1", MLFLOW_TRACKING_URI=uri, MLFLOW_RUN_ID=run_id,
               MLFLOW_ALLOW_FILE_STORE="true")
    args = ["--cpu", "--model-name", str(model_dir), "--data-dir", str(data), "--output-dir", str(out),
            "--tokenizer-dir", str(model_dir), "--max-seq-len", "64", "--labels", "mask-pad",
            "--batch-size", str(B), "--grad-accum", "1", "--lr", "0.003", "--max-steps", str(steps),
            "--save-every", str(save_every), "--metrics-file", str(metrics), "--sample-log", str(samples),
            "--mixed-precision", precision]

    def cmd():
        return [*TORCHRUN, "--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
                EXAMPLE, *args]

    # 1. Start, and SIGKILL the whole job once a checkpoint exists and it has
    # gone on past it (mid-run: it had 20 steps to do).
    log1 = open(tmp_path / "run1.log", "w")
    proc = subprocess.Popen(cmd(), cwd=tmp_path, env=env, stdout=log1, stderr=subprocess.STDOUT)
    latest = ckpt_dir / "latest.json"
    try:
        deadline = time.time() + 300
        while True:
            assert proc.poll() is None, f"the job ended (exit {proc.returncode}) before it was killed:\n" + \
                (tmp_path / "run1.log").read_text()[-4000:]
            assert time.time() < deadline, "no checkpoint after 300 s"
            done = [x["step"] for x in read_jsonl(metrics)] if metrics.exists() else []
            if latest.exists() and done:
                with open(latest) as f:
                    saved = json.load(f)["step"]
                if done[-1] >= saved + 2:
                    break
            time.sleep(0.02)
    finally:
        kill_job(proc)
        log1.close()
    with open(latest) as f:
        k = json.load(f)["step"]
    killed_at = read_jsonl(metrics)[-1]["step"]
    assert k % save_every == 0 and save_every <= k < killed_at < steps, (k, killed_at)
    run1_log = (tmp_path / "run1.log").read_text()
    assert "World size=2" in run1_log and "labels=mask-pad" in run1_log, run1_log[-3000:]
    want_precision = {"bf16": "bf16 mixed precision", "fp32": "fp32"}[precision]
    assert f"FSDP {want_precision}" in run1_log, run1_log[-3000:]

    # 2. Restart with --resume: continues from step k to the end.
    ref = tmp_path / "final.pt"
    args += ["--resume", "--save-reference", str(ref)]
    r = run(cmd(), cwd=tmp_path, env=env)
    assert f"at step {k} (saved with world size 2, now 2;" in r.stdout, r.stdout[-3000:]

    # Loss decreases over the run (the last value logged for each step); the
    # steps run 1 did after the checkpoint are redone with the same losses
    # (model, optimizer and sample order restored).
    last = {}
    for x in read_jsonl(metrics):
        if x["step"] in last and x["step"] > k:
            assert x["loss"] == last[x["step"]], f"step {x['step']}: redone after resume with another loss"
        last[x["step"]] = x["loss"]
    assert sorted(last) == list(range(1, steps + 1))
    losses = [last[i] for i in range(1, steps + 1)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, f"loss did not decrease: {losses}"

    # MLflow (rank 0 only): the run's metrics and params are in the store.
    hist = client.get_metric_history(run_id, "train_loss")
    assert {m.step for m in hist} == set(range(1, steps + 1))
    newest = {}
    for m in sorted(hist, key=lambda m: m.timestamp):
        newest[m.step] = m.value
    assert [newest[i] for i in range(1, steps + 1)] == pytest.approx(losses, rel=1e-6)
    params = client.get_run(run_id).data.params
    assert params["model_name"] == str(model_dir) and params["labels"] == "mask-pad" and params["world_size"] == "2"

    # No sample lost or repeated: per rank, run 1's micro-batches up to the
    # checkpoint + run 2's are exactly a fresh loader's first 20 batches, run
    # 2 starting at the batch after the checkpoint's; and the source records
    # are 80 distinct Alpaca records.
    want, by_crc = expected_order(data, 2, B, steps)
    all_samples = []
    for rank in range(2):
        got = read_jsonl(samples / f"rank-{rank}.jsonl")
        first, second = got[:len(got) - (steps - k)], got[len(got) - (steps - k):]
        assert [x["step"] for x in first] == list(range(1, len(first) + 1)) and len(first) > k, \
            [x["step"] for x in got]
        assert [x["step"] for x in second] == list(range(k + 1, steps + 1)), [x["step"] for x in got]
        # run 1's batches after the checkpoint are redone by run 2 (its model state is the checkpoint's)
        assert [x["crc"] for x in first[k:]] == [x["crc"] for x in second[:len(first) - k]]
        kept = first[:k] + second
        assert [x["crc"] for x in kept] == [w["crc"] for w in want[rank]], f"rank {rank}: other batches"
        assert second[0]["crc"] == want[rank][k]["crc"], "did not resume at the next sample"
        for x in kept:
            for s, c in zip(x["samples"], x["crc"]):
                assert tuple(s) in by_crc[c], (s, c)  # the logged source record is the row's
                all_samples += s
    assert len(all_samples) == 2 * B * steps == len(set(all_samples)), "a sample repeated"
    assert all(0 <= s < 100 for s in all_samples)

    # 3. ckptmerge -> from_pretrained(output_dir): the trained model's logits.
    final = ckpt_dir / f"step-{steps:08d}"
    assert (final / ".metadata").exists() and any(n.endswith(".distcp") for n in os.listdir(final))
    run([ckptmerge, "--force", "--config-from", str(ckpt_dir / "hf-meta"), str(final), str(out)])
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    with open(out / "config.json") as f:
        config = json.load(f)
    assert config.get("dtype", config.get("torch_dtype")) == str(dtype).removeprefix("torch."), config
    got = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    want_model = transformers.LlamaForCausalLM.from_pretrained(str(model_dir), dtype=dtype).eval()
    want_state = torch.load(ref)
    want_model.load_state_dict(want_state, strict=True)
    for name, v in got.state_dict().items():
        assert v.dtype == want_state[name].dtype == dtype, (name, v.dtype, want_state[name].dtype)
        assert torch.equal(v, want_state[name]), name
    ids = torch.tensor([tok.encode("### Instruction:\nGive three tips for staying healthy.\n\n### Response:\n")])
    with torch.no_grad():
        assert torch.equal(got(ids).logits, want_model(ids).logits)
    saved = transformers.AutoTokenizer.from_pretrained(str(out))
    assert saved.pad_token == saved.eos_token is not None
    print(f"tiny-llama FSDP e2e ({precision}): {time.time() - t0:.1f}s (killed at step {killed_at}, resumed from {k})")
