#!/usr/bin/env python3
"""Feed benchmark: ferry.Loader vs DataLoader + DistributedSampler.

Side by side in one process, same rows, same batch size (default 4 x 1024),
rank 0 of a world of 2:

* anchor: the seeds' pattern: a map-style dataset of dict rows (int64
  tensors, as HF ``datasets.with_format("torch")`` hands them out), a
  ``DistributedSampler`` and ``DataLoader(batch_size=4, drop_last=True)``
  collating rows into batches. The dataset is built in memory before timing
  (the seeds spend minutes there; not counted here).
* anchor_formatted_rows: the same, but rows are kept as arrays and made
  into tensors per row in ``__getitem__`` as HF's torch formatter does
  (without HF's Arrow-row decode, so still a lower bound of the seeds' cost).
* ferry: ``ferry.Loader`` over dataprep shards (zero-copy views of the
  mapped files).

Measured per side: time to first batch (from constructing the loader to
holding the first batch; ferry's includes reading manifest.json and mapping
the shard) and per-batch CPU time over a whole epoch (``time.process_time``,
best of --repeat runs). The first batch is touched (one element read); the
others are not, so the per-batch number is the feed's own cost (the shard
pages are in the page cache, as the anchor's rows are in memory). Prints a table and, last, one JSON line
``{"bench": {...}}`` with the ratios.

Usage::

    python3 python/bench_feed.py                      # synthetic shards via the Go generator
    python3 python/bench_feed.py --data DIR           # a dataprep output (>= 2 ranks)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ferry  # noqa: E402

REPO = os.path.dirname(HERE)


class FormattedRows(Dataset):
    """Closer to the seeds: rows kept as arrays and turned into tensors per
    row in __getitem__, as HF datasets' torch formatter does (it reads each
    row from Arrow first, which this leaves out)."""

    def __init__(self, rows):
        self.rows = [{k: v.numpy() for k, v in r.items()} for r in rows]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {k: torch.tensor(v) for k, v in self.rows[i].items()}


class DictRows(Dataset):
    """The seeds' dataset shape: one dict of int64 tensors per row."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def make_synthetic(out, ranks, rows, seq_len):
    exe = os.path.join(out, "mkshards")
    go = shutil.which("go") or "/usr/local/go/bin/go"
    subprocess.run([go, "build", "-o", exe, "./shard/internal/mkshards"], cwd=REPO, check=True)
    d = os.path.join(out, "shards")
    subprocess.run([exe, "-out", d, "-ranks", str(ranks), "-rows", str(rows), "-seq-len", str(seq_len)],
                   check=True, stdout=subprocess.DEVNULL)
    return d


def anchor_rows(data, rank_rows_limit):
    """All rows of all shards in global order, as dicts of int64 tensors."""
    sset = ferry.ShardSet(data)
    m = sset.manifest
    per = min(m.rows_per_rank, rank_rows_limit)
    rows = []
    L = m.seq_len
    ar = np.arange(L)
    for p in range(per * m.ranks):
        s, r = p % m.ranks, p // m.ranks
        cols, _ = sset.shard(s).span(r, 1)
        ids = torch.from_numpy(cols["input_ids"][0].astype(np.int64))
        mask = torch.from_numpy((ar < cols["length"][0]).astype(np.int64))
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": torch.from_numpy(cols["labels"][0].astype(np.int64))})
    return rows, per


def run_epoch(make):
    """(seconds to first batch, CPU seconds per batch after the first, batches)."""
    t0 = time.perf_counter()
    it = iter(make())
    first = next(it)
    int(first["input_ids"][0, 0])
    ttfb = time.perf_counter() - t0
    c0 = time.process_time()
    n = 0
    for _ in it:
        n += 1
    cpu = time.process_time() - c0
    return ttfb, cpu / max(n, 1), n + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="dataprep output directory (default: synthetic shards)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--rows-per-rank", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)

    tmp = tempfile.TemporaryDirectory(prefix="ferry-bench-")
    data = a.data or make_synthetic(tmp.name, 2, 2 * a.rows_per_rank, a.seq_len)
    m = ferry.read_manifest(data)
    if m.ranks < 2:
        sys.exit("bench_feed: want a shard directory with >= 2 ranks")
    world = m.ranks
    rows, per = anchor_rows(data, a.rows_per_rank)
    ds = DictRows(rows)

    fds = FormattedRows(rows)

    def anchor(dataset=ds):
        sampler = DistributedSampler(dataset, num_replicas=world, rank=0, shuffle=True, seed=0)
        sampler.set_epoch(0)
        return DataLoader(dataset, batch_size=a.batch_size, sampler=sampler, drop_last=True)

    def anchor_formatted():
        return anchor(fds)

    def direct():
        return ferry.Loader(data, a.batch_size, rank=0, world_size=world, drop_last=True)

    def direct_dl():
        return ferry.DataLoader(ferry.Loader(data, a.batch_size, rank=0, world_size=world, drop_last=True))

    results = {}
    for name, make in (("anchor_dataloader_distsampler", anchor),
                       ("anchor_formatted_rows", anchor_formatted), ("ferry_loader", direct),
                       ("ferry_dataloader_w0", direct_dl)):
        runs = [run_epoch(make) for _ in range(a.repeat)]
        results[name] = {
            "first_batch_ms": round(min(r[0] for r in runs) * 1e3, 3),
            "first_batch_ms_cold": round(runs[0][0] * 1e3, 3),
            "cpu_us_per_batch": round(min(r[1] for r in runs) * 1e6, 2),
            "batches": runs[0][2],
        }
    an, fe = results["anchor_dataloader_distsampler"], results["ferry_loader"]
    out = {
        "batch": [a.batch_size, m.seq_len],
        "world_size": world,
        "rows_per_rank": per if not a.data else m.rows_per_rank,
        "results": results,
        "per_batch_cpu_ratio_anchor_over_ferry": round(an["cpu_us_per_batch"] / fe["cpu_us_per_batch"], 1),
        "per_batch_cpu_ratio_formatted_over_ferry": round(
            results["anchor_formatted_rows"]["cpu_us_per_batch"] / fe["cpu_us_per_batch"], 1),
        "first_batch_ratio_anchor_over_ferry": round(an["first_batch_ms"] / fe["first_batch_ms"], 1),
        "torch": torch.__version__,
    }
    print(f"{'feed':34s} {'first batch ms':>15s} {'cpu us/batch':>13s} {'batches':>8s}")
    for k, v in results.items():
        print(f"{k:34s} {v['first_batch_ms']:15.3f} {v['cpu_us_per_batch']:13.2f} {v['batches']:8d}")
    print(f"per-batch CPU: anchor / ferry = {out['per_batch_cpu_ratio_anchor_over_ferry']}x, "
          f"formatted-rows anchor / ferry = {out['per_batch_cpu_ratio_formatted_over_ferry']}x")
    print(json.dumps({"bench": out}))


if __name__ == "__main__":
    main()
