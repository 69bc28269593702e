"""ferry.Loader: zero copy, coverage, order, resume (also on another world
size), DataLoader workers. Shards come from the Go generator (see conftest)."""

import os
import random
import shutil

import numpy as np
import pytest
import torch

import ferry
from helpers import locate, read_rows


def run_all(loader):
    """Materialize one iteration: list of (location of input_ids, batch)."""
    return [(locate(loader, b["input_ids"]), b) for b in loader]


def keys_of(batches):
    return [k for k, _ in batches]


def global_sequence(path, world, batch_size, steps=None, state=None, **kw):
    """Run `world` ranks in lockstep (as a job would) for `steps` steps (all
    when None); return (flat list of (shard, offset) step-major rank-minor,
    state of rank 0 after the last step)."""
    loaders = [ferry.Loader(path, batch_size, rank=r, world_size=world, **kw) for r in range(world)]
    if state is not None:
        for ld in loaders:
            ld.load_state_dict(state)
    its = [iter(ld) for ld in loaders]
    seq = []
    n = 0
    while steps is None or n < steps:
        step = [next(it, None) for it in its]
        if step[0] is None:
            assert all(b is None for b in step), "ranks yielded different numbers of batches"
            break
        assert all(b is not None for b in step), "ranks yielded different numbers of batches"
        seq.extend(locate(ld, b["input_ids"]) for ld, b in zip(loaders, step))
        n += 1
    states = [ld.state_dict() for ld in loaders]
    assert all(s == states[0] for s in states), "state_dict differs between ranks"
    return seq, states[0]


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_zero_copy_views_of_the_mapping(make_shards, mode):
    d = make_shards(ranks=2, rows=40 if mode == "pad" else 160, seq_len=16, mode=mode)
    ld = ferry.Loader(d, 4, rank=1, world_size=2)
    m = ld.manifest
    sched = ld.schedule()
    got = list(ld)
    assert len(got) == len(sched) == ld.steps_per_epoch == -(-m.rows_per_rank // 4) >= 3
    sf = ld.shards.shard(1)
    for (shard, row, rows), b in zip(sched, got):
        assert shard == 1
        want_keys = ["input_ids", "attention_mask", "labels"] if mode == "pad" else ["input_ids", "labels", "position_ids"]
        extra = ["cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "use_cache"] * (mode == "pack")
        assert list(b) == want_keys + extra + ["num_items_in_batch"]
        for col in want_keys:
            if col == "attention_mask":
                continue
            t = b[col]
            assert t.dtype == torch.int32 and t.shape == (rows, 16)
            # The tensor's memory is the shard's mapping, at the row's offset.
            assert sf.address <= t.data_ptr() < sf.address + sf.size
            assert t.data_ptr() == sf.row_address(col, row)
            np.testing.assert_array_equal(t.numpy(), read_rows(d, m, 1, col, row, rows))
        if mode == "pad":
            length = read_rows(d, m, 1, "length", row, rows)
            want = (np.arange(16)[None, :] < length[:, None]).astype(np.int32)
            np.testing.assert_array_equal(b["attention_mask"].numpy(), want)
    assert ld.copies == 0


def test_tensors_outlive_close_and_writes_stay_private(make_shards):
    d = make_shards(ranks=1, rows=8, seq_len=8)
    ld = ferry.Loader(d, 4, rank=0, world_size=1, shuffle=False)
    b = next(iter(ld))
    before = b["input_ids"].clone()
    ld.close()
    assert torch.equal(b["input_ids"], before)  # still mapped
    b["input_ids"][0, 0] += 1  # copy-on-write: the file is untouched
    ld2 = ferry.Loader(d, 4, rank=0, world_size=1, shuffle=False)
    assert torch.equal(next(iter(ld2))["input_ids"], before)


@pytest.mark.parametrize("mode", ["pad", "pack"])
@pytest.mark.parametrize("rows,batch,drop_last", [(48, 4, False), (48, 4, True), (50, 4, False), (50, 4, True), (51, 4, False)])
def test_every_row_once_and_ranks_disjoint(make_shards, mode, rows, batch, drop_last):
    ranks = 2
    if mode == "pack":
        rows *= 4  # about 4 examples per packed row
    d = make_shards(ranks=ranks, rows=rows, seq_len=16, mode=mode)
    m = ferry.read_manifest(d)
    seen_samples = []
    for r in range(ranks):
        ld = ferry.Loader(d, batch, rank=r, world_size=ranks, drop_last=drop_last)
        sched = ld.schedule()
        got = list(ld)
        assert len(got) == len(sched) == ld.steps_per_epoch
        rows_seen = []
        for (shard, row, n), b in zip(sched, got):
            assert shard == r, "with world size == ranks a rank reads only its own shard"
            assert b["input_ids"].data_ptr() == ld.shards.shard(r).row_address("input_ids", row)
            assert b["input_ids"].shape[0] == n
            rows_seen.extend(range(row, row + n))
        rpr = m.rows_per_rank
        expect = rpr - (rpr % batch if drop_last else 0)
        assert sorted(rows_seen) == list(range(expect)), "each row exactly once per epoch"
        if not drop_last and rpr % batch:
            assert got[-1]["input_ids"].shape[0] == rpr % batch, "the partial batch comes last"
        sf = ld.shards.shard(r)
        samples = [s for row in rows_seen for (s, _, _) in sf.segments(row)]
        seen_samples.append(samples)
    if m.total_rows == m.unique_rows and not drop_last:
        # No wrap-around: ranks are disjoint and together cover every row.
        assert set(seen_samples[0]).isdisjoint(seen_samples[1])
        # Every source example is in exactly one row of one rank.
        allsamples = sorted(s for ss in seen_samples for s in ss)
        assert allsamples == list(range(rows))
    else:
        # Only wrap-around rows (positions >= unique_rows) may repeat a sample.
        overlap = set(seen_samples[0]) & set(seen_samples[1])
        assert len(overlap) <= m.total_rows - m.unique_rows
        if mode == "pad":
            for ss in seen_samples:
                assert len(ss) == len(set(ss))


def test_epochs_reshuffle_deterministically(make_shards):
    d = make_shards(ranks=2, rows=128, seq_len=8)
    a = ferry.Loader(d, 4, rank=0, world_size=2, seed=7)
    e0 = keys_of(run_all(a))
    a.set_epoch(1)
    e1 = keys_of(run_all(a))
    assert e0 != e1 and sorted(e0) == sorted(e1)
    # Rolling over without set_epoch gives the next epoch as well.
    b = ferry.Loader(d, 4, rank=0, world_size=2, seed=7)
    assert keys_of(run_all(b)) == e0
    assert keys_of(run_all(b)) == e1 and b.epoch == 1
    c = ferry.Loader(d, 4, rank=0, world_size=2, seed=8)
    assert keys_of(run_all(c)) != e0
    off = ferry.Loader(d, 4, rank=0, world_size=2, shuffle=False)
    rows = [row for (_, row, _) in off.schedule()]
    assert rows == sorted(rows)


def test_resume_at_random_points(make_shards):
    d = make_shards(ranks=2, rows=100, seq_len=8)
    rng = random.Random(1234)
    ref_loader = ferry.Loader(d, 3, rank=1, world_size=2, seed=3)
    ref = []
    for e in range(3):
        ref_loader.set_epoch(e)
        ref.extend(keys_of(run_all(ref_loader)))
    per_epoch = ref_loader.steps_per_epoch
    assert len(ref) == 3 * per_epoch
    for k in [0, per_epoch - 1, per_epoch] + [rng.randrange(len(ref)) for _ in range(6)]:
        ld = ferry.Loader(d, 3, rank=1, world_size=2, seed=3)
        got = []
        while len(got) < k:
            for b in ld:
                got.append(locate(ld, b["input_ids"]))
                if len(got) == k:
                    break
        state = ld.state_dict()
        resumed = ferry.Loader(d, 3, rank=1, world_size=2, seed=3)
        resumed.load_state_dict(state)
        # A training loop that calls set_epoch(saved epoch) keeps the point.
        resumed.set_epoch(state["epoch"])
        while len(got) < len(ref):
            for b in resumed:
                got.append(locate(resumed, b["input_ids"]))
        assert got == ref, f"resume after {k} batches"


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("w1,w2", [(4, 2), (4, 3), (2, 4), (4, 8), (1, 4)])
def test_resume_on_a_different_world_size(make_shards, w1, w2, drop_last):
    d = make_shards(ranks=4, rows=200, seq_len=8)
    # The global order: what a single rank reads, block after block.
    ref, _ = global_sequence(d, 1, 4, seed=5, drop_last=drop_last)
    # Reference for world size w1, whole epoch: the same sequence, cut w1 ways.
    full, _ = global_sequence(d, w1, 4, seed=5, drop_last=drop_last)
    assert full[: len(ref) - len(ref) % w1] == ref[: len(ref) - len(ref) % w1]
    steps = len(ref) // w1 // 2
    head, state = global_sequence(d, w1, 4, steps=steps, seed=5, drop_last=drop_last)
    assert state["world_size"] == w1 and state["consumed_blocks"] == steps * w1
    tail, _ = global_sequence(d, w2, 4, state=state, seed=5, drop_last=drop_last)
    got = head + tail
    if drop_last:
        # The uneven remainder (< w2 blocks) is dropped at the end.
        assert len(ref) - len(got) < w2 and got == ref[: len(got)]
    else:
        # The last step is filled by wrapping to the epoch's first blocks.
        assert got[: len(ref)] == ref and len(got) - len(ref) < w2
        assert got[len(ref):] == ref[: len(got) - len(ref)]


def test_world_size_equal_to_ranks_maps_only_own_shard(make_shards):
    d = make_shards(ranks=4, rows=64, seq_len=8)
    ld = ferry.Loader(d, 2, rank=2, world_size=4, num_items_in_batch=False)
    list(ld)
    assert [f is not None for f in ld.shards._files] == [False, False, True, False]
    # num_items_in_batch (the default) counts every rank's loss tokens from
    # dataprep's loss_tokens.u32: still only the own shard is mapped.
    ld = ferry.Loader(d, 2, rank=2, world_size=4)
    want = [b["num_items_in_batch"].item() for b in ld]
    assert [f is not None for f in ld.shards._files] == [False, False, True, False]
    # An output without it (older dataprep): the counts come from the other
    # shards' small length and segment columns, so they are mapped too.
    os.remove(os.path.join(d, "loss_tokens.u32"))
    ld = ferry.Loader(d, 2, rank=2, world_size=4)
    assert [b["num_items_in_batch"].item() for b in ld] == want
    assert all(f is not None for f in ld.shards._files)


def test_num_items_on_a_node_with_only_its_own_shards(make_shards, tmp_path):
    """A node that holds only its ranks' shards, the manifest and
    loss_tokens.u32 (node-local disks) gets the same num_items_in_batch as
    one that holds them all; a corrupt loss_tokens.u32 fails, naming it."""
    d = make_shards(ranks=4, rows=64, seq_len=8)
    node = tmp_path / "node1"
    node.mkdir()
    for name in ["manifest.json", "loss_tokens.u32", "rank-00002-of-00004.arrow", "rank-00003-of-00004.arrow"]:
        shutil.copy(os.path.join(d, name), node / name)
    for rank in (2, 3):
        want = [b["num_items_in_batch"].item() for b in ferry.Loader(d, 2, rank=rank, world_size=4)]
        got = [b["num_items_in_batch"].item() for b in ferry.Loader(node, 2, rank=rank, world_size=4)]
        assert got == want
    data = bytearray((node / "loss_tokens.u32").read_bytes())
    data[0] ^= 1
    (node / "loss_tokens.u32").write_bytes(bytes(data))
    with pytest.raises(ferry.ShardError, match=r"node1/loss_tokens.u32: sha256 differs"):
        ferry.Loader(node, 2, rank=2, world_size=4)
    # Without the file, such a node cannot count the step: a warning says why.
    (node / "loss_tokens.u32").unlink()
    with pytest.warns(UserWarning, match=r"2 of 4 shards are not in .*no loss_tokens.u32"):
        b = next(iter(ferry.Loader(node, 2, rank=2, world_size=4)))
    assert "num_items_in_batch" not in b


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_workers(make_shards, workers):
    d = make_shards(ranks=2, rows=90, seq_len=8)
    ref = [b["input_ids"].clone() for b in ferry.Loader(d, 4, rank=0, world_size=2, seed=1)]
    assert len(ref) == 12
    # ferry.DataLoader: same order as direct iteration, exact resume point.
    ld = ferry.Loader(d, 4, rank=0, world_size=2, seed=1)
    dl = ferry.DataLoader(ld, num_workers=workers)
    got = []
    for b in dl:
        got.append(b["input_ids"].clone())
        if len(got) == 5:
            break
    state = dl.state_dict()
    assert state["consumed_blocks"] == 5 * 2
    ld2 = ferry.Loader(d, 4, rank=0, world_size=2, seed=1)
    dl2 = ferry.DataLoader(ld2, num_workers=workers)
    dl2.load_state_dict(state)
    got.extend(b["input_ids"].clone() for b in dl2)
    assert len(got) == len(ref) and all(torch.equal(x, y) for x, y in zip(got, ref))
    # Plain torch DataLoader: workers take disjoint parts, order preserved.
    plain = torch.utils.data.DataLoader(ferry.Loader(d, 4, rank=0, world_size=2, seed=1), batch_size=None,
                                        num_workers=workers)
    got = [b["input_ids"] for b in plain]
    assert len(got) == len(ref) and all(torch.equal(x, y) for x, y in zip(got, ref))


def test_dataloader_refuses_batching(make_shards):
    d = make_shards(ranks=1, rows=8, seq_len=8)
    ld = ferry.Loader(d, 4, rank=0, world_size=1)
    with pytest.raises(ValueError, match="batch_size"):
        ferry.DataLoader(ld, batch_size=4)
    with pytest.raises(ValueError, match="persistent_workers"):
        ferry.DataLoader(ld, num_workers=1, persistent_workers=True)


def test_to_device_casts_ids(make_shards):
    d = make_shards(ranks=1, rows=8, seq_len=8)
    b = next(iter(ferry.Loader(d, 4, rank=0, world_size=1)))
    out = ferry.to_device(b, "cpu")
    assert out["input_ids"].dtype == torch.int64 and out["labels"].dtype == torch.int64
    assert torch.equal(out["input_ids"], b["input_ids"].long())
    lb = next(iter(ferry.Loader(d, 4, rank=0, world_size=1, attention_mask=False)))
    assert list(lb) == ["input_ids", "length", "labels", "num_items_in_batch"]
    out2 = ferry.to_device(lb, "cpu")
    assert list(out2) == ["input_ids", "attention_mask", "labels", "num_items_in_batch"]
    assert torch.equal(out2["attention_mask"], b["attention_mask"].long())


def test_rank_from_torchrun_env(make_shards, monkeypatch):
    d = make_shards(ranks=2, rows=16, seq_len=8)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    ld = ferry.Loader(d, 2)
    assert (ld.rank, ld.world_size) == (1, 2)
    assert ferry.resolve_dist().source == "env"
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="out of range"):
        ferry.Loader(d, 2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert ferry.resolve_dist() == ferry.DistInfo(0, 1, 0, "single")
    with pytest.raises(ValueError, match="both"):
        ferry.Loader(d, 2, rank=0)


def test_blocks_straddling_record_batches_are_copied(make_shards):
    # Record batches of 6 rows, batches of 4: every other block straddles.
    d = make_shards(ranks=1, rows=24, seq_len=8, extra=("-batch-rows", "6"))
    with pytest.warns(UserWarning, match="copied"):
        ld = ferry.Loader(d, 4, rank=0, world_size=1, shuffle=False)
    m = ld.manifest
    assert [b["rows"] for b in m.files[0]["batches"]] == [6, 6, 6, 6]
    for (_, row, rows), b in zip(ld.schedule(), ld):
        for col in ("input_ids", "labels"):
            np.testing.assert_array_equal(b[col].numpy(), read_rows(d, m, 0, col, row, rows))
        inside = locate(ld, b["input_ids"]) is not None
        assert inside == (row // 6 == (row + rows - 1) // 6)
    assert ld.copies == 2  # rows 4..7 and 16..19


def test_pickle_round_trip_remaps(make_shards):
    # DataLoader workers started with "spawn" get a pickled Loader: it must
    # carry its position, not its mappings, and map the files again.
    import pickle

    d = make_shards(ranks=2, rows=40, seq_len=8)
    ld = ferry.Loader(d, 2, rank=0, world_size=2, seed=4)
    it = iter(ld)
    next(it), next(it)
    clone = pickle.loads(pickle.dumps(ld))
    assert all(f is None for f in clone.shards._files)
    rest = [b["input_ids"].clone() for b in it]
    again = list(clone)
    assert len(again) == len(rest) == ld.steps_per_epoch - 2
    assert all(torch.equal(x["input_ids"], y) for x, y in zip(again, rest))
    assert locate(clone, again[0]["input_ids"]) is not None  # a view of clone's own mapping


@pytest.mark.parametrize("R,rows,B,drop_last,shuffle", [(4, 50, 4, False, True), (3, 7, 2, True, True),
                                                      (2, 9, 4, False, False), (5, 3, 4, False, True)])
def test_epoch_order_vectorized_matches_scalar(R, rows, B, drop_last, shuffle):
    o = ferry.EpochOrder(R, rows, B, epoch=3, seed=11, shuffle=shuffle, drop_last=drop_last)
    for first, stride in [(0, 1), (1, 3), (2, R), (o.G - 1, 2)]:
        count = o.G + 3  # runs past the end: wraps like block()
        s, r, n = o.blocks(first, count, stride)
        assert list(zip(s, r, n)) == [o.block(first + i * stride) for i in range(count)]
    # Every block of the epoch exactly once, each a distinct row range.
    got = sorted(o.block(g) for g in range(o.G))
    assert len(set(got)) == o.G
    assert sum(n for _, _, n in got) == R * (rows - (rows % B if drop_last else 0))


def test_rank_from_ray_train_context(make_shards, monkeypatch):
    # Ray is not installed here: a stand-in ray.train module with the
    # context API (get_world_rank / get_world_size / get_local_rank).
    import sys
    import types

    class Ctx:
        def get_world_rank(self):
            return 3

        def get_world_size(self):
            return 4

        def get_local_rank(self):
            return 1

    train = types.ModuleType("ray.train")
    train.get_context = lambda: Ctx()
    ray = types.ModuleType("ray")
    ray.train = train
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.train", train)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert ferry.resolve_dist() == ferry.DistInfo(3, 4, 1, "ray")
    d = make_shards(ranks=4, rows=32, seq_len=8)
    ld = ferry.Loader(d, 2)
    assert (ld.rank, ld.world_size) == (3, 4)
    assert all(s == 3 for s, _, _ in ld.schedule())

    def no_session():
        raise RuntimeError("not in a Ray Train session")

    train.get_context = no_session
    assert ferry.resolve_dist().source == "single"
