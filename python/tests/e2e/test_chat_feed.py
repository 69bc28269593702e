"""Chat shards through the feed: ferry.Loader yields the labels dataprep
wrote (assistant turns only) and num_items_in_batch counts exactly the
assistant tokens of each step, over all ranks; ferry-serve's daemon feed
gives the same batches."""
import json
import signal
import subprocess

import numpy as np
import pytest
import torch

import ferry
from ferry.serve_client import ServeLoader
from helpers import REPO, Daemon, build_go_tool, model_dir

pa = pytest.importorskip("pyarrow")
tokenizers = pytest.importorskip("tokenizers")

RANKS = 2
BATCH = 3


@pytest.fixture(scope="module")
def chat_shards(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chatfeed")
    exe = build_go_tool("cmd/dataprep", str(tmp))
    model = model_dir(tmp, "qwen2.5")
    out = tmp / "shards"
    r = subprocess.run([exe, "--input", f"{REPO}/testdata/chat/fastchat-dummy/dummy_conversation.json.zst",
                        "--tokenizer", str(model), "--out", str(out), "--mode", "pack", "--seq-len", "1024",
                        "--ranks", str(RANKS), "--date", "2026-07-26", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr  # chat auto-detected, --labels assistant by default
    return out, model


def test_loader_yields_assistant_labels_and_counts_them(chat_shards):
    out, model = chat_shards
    tok = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    im_end = tok.token_to_id("<|im_end|>")
    shard_labels = []
    for r in range(RANKS):
        t = pa.ipc.open_file(str(out / f"rank-{r:05d}-of-{RANKS:05d}.arrow")).read_all()
        shard_labels.append(np.array(t["labels"].to_pylist()))
    total = sum(int((lab[:, 1:] != -100).sum()) for lab in shard_labels)
    assert total > 0
    loaders = [ferry.Loader(str(out), BATCH, rank=r, world_size=RANKS, shuffle=False) for r in range(RANKS)]
    counted = 0.0
    trained = 0
    for step in zip(*loaders):
        n = step[0]["num_items_in_batch"]
        step_tokens = 0
        for b in step:
            assert b["num_items_in_batch"] == n  # the same on every rank
            lab, ids = b["labels"], b["input_ids"]
            keep = lab != -100
            assert torch.equal(lab[keep], ids[keep].to(lab.dtype))  # labels are the ids where trained
            step_tokens += int(keep[:, 1:].sum())
            # every trained run ends with <|im_end|>: the end of turn is trained
            k = keep.flatten().numpy()
            ends = np.flatnonzero(k[:-1] & ~k[1:])
            assert all(int(ids.flatten()[e]) == im_end for e in ends), "a trained span does not end at <|im_end|>"
            trained += int(keep.sum())
        assert float(n) * RANKS == pytest.approx(step_tokens)
        counted += float(n) * RANKS
    assert counted == pytest.approx(total)
    assert trained == total  # no label at a row's first position


def test_reused_data_dir_with_another_template_or_date_is_refused(chat_shards):
    out, model = chat_shards
    with open(model / "tokenizer_config.json", encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    assert ferry.data_dir_mismatches(str(out), model, labels="assistant", chat_template=template, date="2026-07-26") == []
    bad = ferry.data_dir_mismatches(str(out), model, chat_template=template + " ", date="2026-07-27")
    assert len(bad) == 2 and "chat template sha256" in bad[0] and "date 2026-07-26 != 2026-07-27" in bad[1], bad


def test_ferry_serve_gives_the_loaders_batches(chat_shards, serve_bin, tmp_path):
    """One ferry-serve for both ranks of the chat shards: every batch of two
    epochs equals ferry.Loader's (the shard's assistant labels, attention
    keys of the packed conversations, num_items_in_batch = the step's
    assistant tokens), shuffled and in order."""
    out, _ = chat_shards
    d = Daemon(serve_bin, str(out), str(tmp_path / "serve.sock"), ["--ranks", f"0-{RANKS - 1}"])
    try:
        for kw in ({"shuffle": False}, {"seed": 3}):
            for rank in range(RANKS):
                direct = ferry.Loader(str(out), BATCH, rank=rank, world_size=RANKS, **kw)
                served = ServeLoader(d.sock, BATCH, rank=rank, world_size=RANKS, data_dir=str(out), **kw)
                assert len(served) == len(direct) > 0
                for epoch in (0, 1):
                    direct.set_epoch(epoch)
                    served.set_epoch(epoch)
                    want = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in direct]
                    n = 0
                    for a, b in zip(want, served):
                        assert list(a) == list(b)
                        for k in a:
                            if isinstance(a[k], torch.Tensor):
                                assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), (kw, rank, epoch, n, k)
                            else:
                                assert a[k] == b[k], (kw, rank, epoch, n, k)
                        assert (b["labels"] != -100).any()
                        n += 1
                    assert n == len(want)
                served.close()
                direct.close()
    finally:
        code = d.kill(signal.SIGTERM)
    assert code == 0, d.output()
