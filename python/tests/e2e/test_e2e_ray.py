"""End to end on a real local Ray cluster (issue 16, "Ray example"): one
`ray start --head` on 127.0.0.1 with 2 CPUs, and examples/ray-train's driver
(``train_ray.main``): dataprep on the tiny Alpaca -> ``TorchTrainer`` with 2
CPU workers (gloo, the example's ``train_func``, a tiny random-init
``Qwen2ForCausalLM`` sized for the Qwen2.5 tokenizer, loaded from a local
directory with ``--model``, FSDP1) -> sharded DCP checkpoints reported to Ray
-> ckptmerge -> ``from_pretrained(output_dir)``. The example runs in pack
mode (``--mode pack``: several Alpaca records per row, ``check_packing`` on
the real model, the per-document attention keys and ``num_items_in_batch``
in every batch); the torchrun e2e covers pad mode.

Rank 1 kills itself (``os._exit``) once, mid-run; ``FailureConfig
(max_failures=1)`` restarts the workers from the last reported checkpoint
(``ray.train.get_checkpoint()``: model, optimizer, loader position). Every
worker logs the rows it is fed, so the test checks that no sample is lost or
repeated over the run. One training run for the module; the tests check its
outcome.

No second Ray worker node: the machine has 2 cores and the 2 workers take
both CPUs of the head node; a second node would only add raylets.

Marked e2e. It never skips: a missing tool or library is a failure."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch

from helpers import REPO, TESTS, RayTempDir, build_go_tool

pytestmark = pytest.mark.e2e

ALPACA = os.path.join(REPO, "testdata", "alpaca", "alpaca_tiny.json")
TOKSRC = os.path.join(REPO, "testdata", "tokenizers", "qwen2.5")
EXAMPLE_DIR = os.path.join(REPO, "examples", "ray-train")
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
RAY = os.path.join(os.path.dirname(sys.executable), "ray")

WORKERS, BATCH, SEQ_LEN, MAX_STEPS, SAVE_EVERY = 2, 2, 128, 8, 3
KILL_AT = 8  # rank 1 dies when fed its 8th batch: last checkpoint at step 6, step 7 is trained again


# --- runs inside the Ray Train workers (imported from PYTHONPATH) ------------

def faulty_train_func(config):
    """The example's train_func, with ferry.Loader wrapped to log the rows
    each batch holds (rank, attempt, per-rank batch number) and, in the first
    attempt, to kill rank 1 when it is fed batch KILL_AT (a marker file makes
    it happen once)."""
    import ferry
    import ray.train
    import train_ray

    logdir = os.environ["FERRY_E2E_LOG"]
    rank = ray.train.get_context().get_world_rank()
    marker = os.path.join(logdir, "killed")
    attempt = 2 if os.path.exists(marker) else 1
    Loader, Base = ferry.Loader, ferry.MappedLoader

    class LoggedLoader(Base):
        def __iter__(self):
            sched = self.schedule()
            done = self.state_dict()["consumed_blocks"] // self.world_size
            with open(os.path.join(logdir, f"rank{rank}-attempt{attempt}.jsonl"), "a") as f:
                for i, batch in enumerate(super().__iter__()):
                    n = done + i + 1
                    if attempt == 1 and rank == 1 and n == KILL_AT:
                        open(marker, "w").close()
                        time.sleep(2)  # the controller (polling every 0.5 s) has the last checkpoint
                        os._exit(1)
                    shard, row, rows = sched[i]
                    f.write(json.dumps({"n": n, "rows": [[int(shard), int(row) + j] for j in range(int(rows))],
                                        "keys": sorted(batch)}) + "\n")
                    f.flush()
                    yield batch

    def logged(path, batch_size, *, serve=None, **kwargs):
        assert not serve, "the kill test feeds from mapped shards"
        return LoggedLoader(path, batch_size, **kwargs)

    ferry.Loader = logged
    try:
        train_ray.train_func(config)
    finally:
        ferry.Loader = Loader


# --- fixtures ----------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    """A one-node Ray cluster on 127.0.0.1 with 2 CPUs; `ray stop --force` after."""
    with RayTempDir() as tmp:
        env = tmp.env(dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", f"--num-cpus={WORKERS}",
               "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp.temp_dir}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
            if r.returncode != 0:
                pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            yield f"127.0.0.1:{port}"
        finally:
            subprocess.run([RAY, "stop", "--force"], capture_output=True, env=env, timeout=120)


def tiny_qwen(tok_dir, out):
    """A random-init Qwen2ForCausalLM sized for the Qwen2.5 tokenizer (its
    real vocab of 151,936), hidden 64, 2 layers, saved with the tokenizer."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = Qwen2Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                      eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def run(ray_cluster, tmp_path_factory):
    """dataprep -> fit (with the kill and the restart) -> ckptmerge, through
    the example's driver."""
    root = tmp_path_factory.mktemp("e2e-ray")
    bindir = root / "bin"
    bindir.mkdir()
    try:
        dataprep = build_go_tool("cmd/dataprep", str(bindir))
        ckptmerge = build_go_tool("cmd/ckptmerge", str(bindir))
    except RuntimeError as e:
        pytest.fail(f"e2e needs the Go tools: {e}")
    tok = root / "tok"
    tok.mkdir()
    with open(tok / "tokenizer.json", "wb") as f:
        subprocess.run(["zstd", "-dc", os.path.join(TOKSRC, "tokenizer.json.zst")], stdout=f, check=True)
    shutil.copy(os.path.join(TOKSRC, "tokenizer_config.json"), tok)
    model = tiny_qwen(str(tok), str(root / "init-model"))
    logdir = root / "samples"
    logdir.mkdir()

    import mlflow
    import ray

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # mlflow 3's file store is opt-in
    tracking = f"file:{root / 'mlruns'}"
    client = mlflow.MlflowClient(tracking_uri=tracking)
    run_id = client.create_run(client.create_experiment("ferry-ray-e2e")).info.run_id

    sys.path.insert(0, EXAMPLE_DIR)
    try:
        import train_ray
    finally:
        sys.path.remove(EXAMPLE_DIR)
    env_vars = {"PYTHONPATH": os.pathsep.join([EXAMPLE_DIR, TESTS_DIR, TESTS]), "OMP_NUM_THREADS": "1",
                "FERRY_E2E_LOG": str(logdir), "MLFLOW_TRACKING_URI": tracking, "MLFLOW_RUN_ID": run_id,
                "MLFLOW_ALLOW_FILE_STORE": "true", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
                "RAY_USAGE_STATS_ENABLED": "0"}
    out = root / "output"
    argv = ["--cpu", "--model", model, "--num-workers", str(WORKERS), "--input", ALPACA, "--tokenizer", str(tok),
            "--seq-len", str(SEQ_LEN), "--labels", "mask-pad", "--mode", "pack", "--data-dir", str(root / "data"),
            "--checkpoint-dir", str(root / "dcp"), "--output-dir", str(out), "--config-from", model,
            "--dataprep", dataprep, "--ckptmerge", ckptmerge, "--batch-size", str(BATCH), "--lr", "3e-3",
            "--max-steps", str(MAX_STEPS), "--save-every", str(SAVE_EVERY), "--max-failures", "1",
            "--storage-path", str(root / "ray_results")]
    saved = train_ray.train_func
    ray.init(address=ray_cluster, runtime_env={"env_vars": env_vars}, log_to_driver=True)
    t0 = time.time()
    try:
        train_ray.train_func = faulty_train_func
        result = train_ray.main(argv)
    finally:
        train_ray.train_func = saved
        ray.shutdown()
    print(f"dataprep + fit + ckptmerge: {time.time() - t0:.1f}s")
    return dict(root=root, result=result, model=model, out=str(out), logdir=str(logdir), data=str(root / "data"),
                dcp=str(root / "dcp"), client=client, run_id=run_id)


# --- tests ---------------------------------------------------------------------

def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_worker_killed_and_resumed_from_the_last_checkpoint(run):
    assert os.path.exists(os.path.join(run["logdir"], "killed")), "rank 1 was never killed"
    assert run["result"].checkpoint is not None
    for rank in range(WORKERS):
        first = read_log(os.path.join(run["logdir"], f"rank{rank}-attempt1.jsonl"))
        second = read_log(os.path.join(run["logdir"], f"rank{rank}-attempt2.jsonl"))
        assert first and second, f"rank {rank}: attempt logs {len(first)}, {len(second)} batches"
        resumed = second[0]["n"] - 1
        # the restart began at the last checkpoint before the kill, not at 0
        assert resumed == (KILL_AT - 1) // SAVE_EVERY * SAVE_EVERY, f"rank {rank} resumed after batch {resumed}"
        assert [b["n"] for b in second] == list(range(resumed + 1, MAX_STEPS + 1))
    first1 = read_log(os.path.join(run["logdir"], "rank1-attempt1.jsonl"))
    assert [b["n"] for b in first1] == list(range(1, KILL_AT))


def test_no_sample_lost_or_repeated(run):
    """Per rank: the batches trained into the final model (attempt 1 up to
    the checkpoint it resumed from, then attempt 2) are exactly the ones a
    fresh, uninterrupted loader yields, in order; no row appears twice."""
    import ferry

    seen = []
    for rank in range(WORKERS):
        first = read_log(os.path.join(run["logdir"], f"rank{rank}-attempt1.jsonl"))
        second = read_log(os.path.join(run["logdir"], f"rank{rank}-attempt2.jsonl"))
        resumed = second[0]["n"] - 1
        got = [b["rows"] for b in first if b["n"] <= resumed] + [b["rows"] for b in second]
        loader = ferry.Loader(run["data"], BATCH, rank=rank, world_size=WORKERS, drop_last=True, seed=0)
        want = [[[s, r + j] for j in range(n)] for s, r, n in loader.schedule()[:MAX_STEPS]]
        loader.close()
        assert got == want, f"rank {rank}: the rows trained differ from the uninterrupted order"
        seen += [tuple(x) for b in got for x in b]
    assert len(seen) == WORKERS * MAX_STEPS * BATCH and len(set(seen)) == len(seen)
    # Pack-mode batches: the per-document attention keys and the step's
    # token count, never an attention_mask.
    for rank in range(WORKERS):
        for b in read_log(os.path.join(run["logdir"], f"rank{rank}-attempt2.jsonl")):
            assert {"position_ids", "cu_seq_lens_q", "max_length_q", "num_items_in_batch"} <= set(b["keys"]), b["keys"]
            assert "attention_mask" not in b["keys"]
    # The rows are packed: the records they hold are distinct, and at seq_len
    # 128 (the tiny Alpaca's prompts are ~40-250 tokens) many rows hold several.
    shards = ferry.ShardSet(run["data"])
    assert shards.manifest.mode == "pack"
    records = [[s for s, _, _ in shards.shard(r).segments(j)] for r, j in seen]
    shards.close()
    flat = [s for rec in records for s in rec]
    assert len(flat) == len(set(flat)), "a record trained twice"
    assert len(flat) >= 1.3 * len(records), [len(rec) for rec in records]


def test_loss_decreases_and_mlflow_has_it(run):
    client, run_id = run["client"], run["run_id"]
    hist = sorted(client.get_metric_history(run_id, "train_loss"), key=lambda m: m.timestamp)
    by_step, again = {}, []
    for m in hist:
        if m.step in by_step:  # trained after the last checkpoint, then again after the restart
            again.append((m.step, by_step[m.step], m.value))
        by_step[m.step] = m.value
    assert sorted(by_step) == list(range(1, MAX_STEPS + 1)), sorted(by_step)
    resumed = (KILL_AT - 1) // SAVE_EVERY * SAVE_EVERY
    # the restart retrains those steps from the checkpoint's model, optimizer
    # and loader position: the same batches give the same losses
    assert [s for s, _, _ in again] == list(range(resumed + 1, KILL_AT)), again
    for s, before, after in again:
        assert after == pytest.approx(before, rel=1e-5, abs=1e-6), f"step {s}: loss {before} before the kill, {after} after"
    losses = [by_step[s] for s in range(1, MAX_STEPS + 1)]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3, losses
    params = client.get_run(run_id).data.params
    assert params["model"] == run["model"] and params["labels"] == "mask-pad"


def test_merged_model_logits_equal_the_trained_model(run):
    """ckptmerge's output_dir loads with from_pretrained and gives the logits
    of the final DCP checkpoint loaded into the model by torch."""
    import ferry.dcp
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with open(os.path.join(run["dcp"], "latest.json")) as f:
        last = json.load(f)
    assert last["step"] == MAX_STEPS
    trained = AutoModelForCausalLM.from_pretrained(run["model"], dtype=torch.float32)
    init = {k: v.clone() for k, v in trained.state_dict().items()}
    ferry.dcp.load_train_state(os.path.join(run["dcp"], last["checkpoint"]), trained)
    assert any(not torch.equal(init[k], v) for k, v in trained.state_dict().items()), "training changed nothing"
    merged = AutoModelForCausalLM.from_pretrained(run["out"], dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(run["out"])
    assert tok.pad_token is not None  # the seed's pad = eos where the tokenizer has none
    assert os.path.exists(os.path.join(run["out"], "generation_config.json"))
    ids = tok(["### Instruction:\nName a color.\n\n### Response:\n"], return_tensors="pt")["input_ids"]
    trained.eval()
    merged.eval()
    with torch.no_grad():
        assert torch.equal(trained(ids).logits, merged(ids).logits)
