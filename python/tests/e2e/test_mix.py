"""Mixtures (dataprep --recipe, docs/mixtures.md) through the feed: the
loader's source ids are the shards' segments' sources, the loss splits by
source and sums to the model's loss, and resuming on another world size
keeps the mixture."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

import ferry
from ferry import protocol as sc
from helpers import REPO, Daemon, arrowcheck, build_go_tool, model_dir

pa = pytest.importorskip("pyarrow")

RANKS = 4
BATCH = 2
RECIPE = f"""\
sources:
  - name: domain
    inputs: [{REPO}/testdata/alpaca/alpaca_tiny.json]
    max_records: 40
    repeat: 2.5
  - name: chat
    inputs: [{REPO}/testdata/chat/fastchat-dummy/dummy_conversation.json.zst]
    weight: 0.5
"""


def dataprep(exe, model, recipe, out, mode):
    r = subprocess.run([exe, "--recipe", str(recipe), "--tokenizer", str(model), "--out", str(out), "--mode", mode,
                        "--seq-len", "512", "--ranks", str(RANKS), "--seed", "3", "--date", "2026-07-26", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    check = arrowcheck()
    if check is not None:  # pyarrow reads the version 2 shards as ferry does
        rep = check.check_dirs([str(out)])
        assert rep.ok, rep.text()
    return out


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mix")
    exe = build_go_tool("cmd/dataprep", str(tmp))
    model = model_dir(tmp, "qwen2.5")
    recipe = tmp / "recipe.yaml"
    recipe.write_text(RECIPE)
    return {mode: dataprep(exe, model, recipe, tmp / mode, mode) for mode in ("pad", "pack")}


def segment_sources(out, rank):
    """Each row's token sources from the shard read with pyarrow: -1 on padding."""
    t = pa.ipc.open_file(str(out / f"rank-{rank:05d}-of-{RANKS:05d}.arrow")).read_all()
    L = len(t["input_ids"][0])
    rows = []
    for segs in t["segments"].to_pylist():
        row = np.full(L, -1, np.int32)
        for s in segs:
            row[s["start"]:s["start"] + s["length"]] = s["source"]
        rows.append(row)
    return np.stack(rows)


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_source_ids_are_the_segments_sources(mix, mode):
    out = mix[mode]
    m = ferry.read_manifest(str(out))
    assert m.version == 2 and [s["name"] for s in m.sources] == ["domain", "chat"]
    for rank in range(RANKS):
        want = segment_sources(out, rank)
        ld = ferry.Loader(str(out), BATCH, rank=rank, world_size=RANKS, shuffle=False, sources=True)
        assert ld.source_names == ["domain", "chat"]
        got = np.concatenate([b["source_ids"].numpy() for b in ld])
        assert np.array_equal(got, want[:len(got)]) and len(got) == len(want)
        assert {0, 1} <= set(np.unique(got).tolist())
    # off by default: the batch is what model(**batch) takes
    assert "source_ids" not in next(iter(ferry.Loader(str(out), BATCH, rank=0, world_size=RANKS)))


def test_loss_by_source_sums_to_the_models_loss(mix):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=151936, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    ld = ferry.Loader(str(mix["pad"]), 4, rank=0, world_size=RANKS, sources=True)
    seen = torch.zeros(2, dtype=torch.int64)
    for k, batch in zip(range(3), ld):
        src = batch.pop("source_ids")
        b = ferry.to_device(batch, "cpu")
        with torch.no_grad():
            out = model(**b)
        for n in (b["num_items_in_batch"], None):
            sl = ferry.loss_by_source(out.logits, b["labels"], src, len(ld.source_names), num_items_in_batch=n)
            want = out.loss if n is not None else ferry.causal_lm_loss(out.logits, b["labels"])
            assert torch.allclose(sl.loss, want, rtol=1e-5), (k, sl.loss, want)
            assert torch.allclose(sl.parts.sum(), sl.loss, rtol=1e-5)
            assert int(sl.tokens.sum()) == int((b["labels"][:, 1:] != -100).sum())
        seen += sl.tokens
    assert (seen > 0).all(), seen  # both sources in the first steps
    means = ferry.source_means(sl.sums, sl.tokens, ld.source_names)
    assert set(means) <= {"domain", "chat"} and all(v > 0 for v in means.values())
    # a gradient flows through the parts
    model.train()
    batch = next(iter(ld))
    src = batch.pop("source_ids")
    b = ferry.to_device(batch, "cpu")
    sl = ferry.loss_by_source(model(**b).logits, b["labels"], src, 2, num_items_in_batch=b["num_items_in_batch"])
    sl.parts[1].backward()
    assert model.lm_head.weight.grad is not None


def global_sources(path, world, steps=None, state=None):
    """Run `world` ranks in lockstep; returns the source ids of every batch,
    step-major rank-minor, and rank 0's state after the last step."""
    loaders = [ferry.Loader(str(path), BATCH, rank=r, world_size=world, seed=5, sources=True) for r in range(world)]
    if state is not None:
        for ld in loaders:
            ld.load_state_dict(state)
    its = [iter(ld) for ld in loaders]
    seq, n = [], 0
    while steps is None or n < steps:
        step = [next(it, None) for it in its]
        if step[0] is None:
            break
        seq.extend(b["source_ids"].numpy() for b in step)
        n += 1
    return seq, loaders[0].state_dict()


@pytest.mark.parametrize("w2", [2, 3])
def test_resume_on_another_world_size_keeps_the_mixture(mix, w2):
    out = mix["pack"]
    ref, _ = global_sources(out, 1)  # the global order, one rank reading it all
    head, state = global_sources(out, RANKS, steps=len(ref) // RANKS // 2)
    tail, _ = global_sources(out, w2, state=state)
    got = head + tail
    assert len(got) >= len(ref)
    for k in range(len(ref)):
        assert np.array_equal(got[k], ref[k]), f"batch {k} of the epoch differs after the resume"
    # the epoch holds every source (each token once, rows repeated to even
    # out ranks aside) in the manifest's proportions
    m = ferry.read_manifest(str(out))
    counts = np.bincount(np.concatenate(ref).ravel() + 1, minlength=3)[1:]
    for i, s in enumerate(m.sources):
        assert s["tokens"] <= counts[i] <= s["tokens"] + (RANKS - 1) * m.seq_len, (s, counts)


def same_feed(direct, served, epochs=2):
    """The two loaders yield equal batches (keys in order, dtypes, values),
    epoch after epoch; returns the number of batches compared."""
    n = 0
    for epoch in range(epochs):
        direct.set_epoch(epoch)
        served.set_epoch(epoch)
        for d, s in zip(direct, served, strict=True):
            assert list(d) == list(s), (epoch, n)
            for k in d:
                if isinstance(d[k], torch.Tensor):
                    assert d[k].dtype == s[k].dtype and torch.equal(d[k], s[k]), (epoch, n, k)
                else:
                    assert d[k] == s[k], (epoch, n, k)
            n += 1
    assert direct.state_dict() == served.state_dict()
    return n


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_served_source_ids_equal_direct(mix, mode, serve_bin, tmp_path):
    """ferry-serve fills source_ids: the daemon's batches equal the mapped
    shards' on a mixture, source ids included (-1 on padding)."""
    out = str(mix[mode])
    d = Daemon(serve_bin, out, str(tmp_path / "serve.sock"))
    try:
        kw = dict(rank=1, world_size=RANKS, seed=5, sources=True)
        direct = ferry.Loader(out, BATCH, **kw)
        served = ferry.Loader(out, BATCH, serve=d.sock, slots=3, **kw)
        assert type(served) is ferry.ServeLoader and served.source_names == direct.source_names == ["domain", "chat"]
        assert served.connection.layout.columns[sc.COL_SOURCE_IDS][0] > 0
        assert same_feed(direct, served) > 4
        seen = torch.cat([b["source_ids"].flatten() for b in served]).unique().tolist()
        assert {0, 1} <= set(seen) and (mode == "pack" or -1 in seen), seen
        served.close()
    finally:
        d.kill(signal.SIGTERM)


def test_served_source_ids_of_one_input(make_shards, serve_bin, tmp_path):
    """A version 1 data set through the daemon: source 0 on every token,
    -1 on padding, as the direct loader gives."""
    data = make_shards(ranks=2, rows=20, seq_len=8, mode="pad")
    d = Daemon(serve_bin, data, str(tmp_path / "serve.sock"))
    try:
        direct = ferry.Loader(data, 4, rank=0, world_size=2, sources=True)
        served = ferry.Loader(data, 4, rank=0, world_size=2, sources=True, serve=d.sock)
        assert served.manifest.raw.get("version", 1) == 1 and served.source_names == ["data"]
        assert same_feed(direct, served, epochs=1) > 1
        served.close()
    finally:
        d.kill(signal.SIGTERM)


def test_data_of_one_input_has_source_zero(make_shards):
    d = make_shards(ranks=2, rows=20, seq_len=8, mode="pack")
    ld = ferry.Loader(d, 4, rank=0, world_size=2, shuffle=False, sources=True)
    assert ld.manifest.version == 1 and ld.source_names == ["data"]
    for b in ld:
        ids = b["source_ids"].numpy()
        assert set(np.unique(ids).tolist()) <= {-1, 0} and (ids == 0).any()


@pytest.mark.parametrize("served", [False, True], ids=["direct", "serve"])
def test_torchrun_example_logs_loss_per_source(mix, tmp_path, served, request):
    """examples/torchrun-fsdp on a mixture (two ranks, the stand-in model on
    pad-mode rows), reading the shards or (--serve) through ferry-serve:
    every step logs the loss of each source."""
    metrics = tmp_path / "metrics.jsonl"
    serve = []
    if served:
        d = Daemon(request.getfixturevalue("serve_bin"), str(mix["pad"]), str(tmp_path / "serve.sock"))
        request.addfinalizer(lambda: d.kill(signal.SIGTERM))
        serve = ["--serve", d.sock]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        os.path.join(REPO, "examples", "torchrun-fsdp", "train.py"), "--tiny", "--vocab-size", "151936",
                        "--data-dir", str(mix["pad"]), "--labels", "assistant", "--output-dir", str(tmp_path / "out"),
                        "--checkpoint-dir", str(tmp_path / "ckpt"), "--batch-size", "2", "--grad-accum", "2",
                        "--max-steps", "3", "--metrics-file", str(metrics), *serve],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert [x["step"] for x in steps] == [1, 2, 3], steps
    seen = set()
    for x in steps:
        per = x["loss_by_source"]
        assert set(per) <= {"domain", "chat"} and all(0 < v < 100 for v in per.values()), x
        seen |= set(per)
    assert seen == {"domain", "chat"}, steps
    assert "loss/" in r.stdout
