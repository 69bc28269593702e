#!/usr/bin/env python3
"""Daemon feed benchmark: ferry-serve + ServeLoader vs the direct ferry.Loader
vs DataLoader + DistributedSampler, side by side in one run.

Same rows, same batch size (default 4 x 1024), rank 0 of the shards' world:

* anchor: the seeds' pattern: a map-style dataset of dict rows (int64
  tensors, as HF ``datasets`` with the torch format hands them out), a
  ``DistributedSampler`` and ``DataLoader(batch_size=B, drop_last=True)``
  collating rows into batches (dataset built in memory before timing);
* ferry_direct: ``ferry.Loader`` (zero-copy views of the mapped shards);
* ferry_serve: ``ferry.serve_client.ServeLoader`` fed by a ``ferry-serve``
  daemon started by this script (batches are copied into a shared-memory
  ring by the daemon; the views handed out are of the ring).

Per side: time to first batch (constructing the loader, which for the daemon
includes connecting and receiving the ring, until the first batch is held;
and from ``iter()`` alone), client CPU per batch over an epoch
(``time.process_time``, best of --repeat), wall time per batch, and for the
daemon its own CPU per batch (from /proc/PID/stat). The last line is one
JSON object ``{"bench": {...}}``.

Usage::

    python3 python/bench_serve.py                      # synthetic shards (Go generator)
    python3 python/bench_serve.py --data DIR [--serve-bin bin/ferry-serve]
"""

import argparse
import json
import os
import shutil
import socket
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
from ferry.serve_client import ServeLoader  # noqa: E402

REPO = os.path.dirname(HERE)


class DictRows(Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def go():
    return shutil.which("go") or "/usr/local/go/bin/go"


def make_synthetic(out, ranks, rows, seq_len):
    exe = os.path.join(out, "mkshards")
    subprocess.run([go(), "build", "-o", exe, "./shard/internal/mkshards"], cwd=REPO, check=True)
    d = os.path.join(out, "shards")
    subprocess.run([exe, "-out", d, "-ranks", str(ranks), "-rows", str(rows), "-seq-len", str(seq_len)],
                   check=True, stdout=subprocess.DEVNULL)
    return d


def anchor_rows(data):
    sset = ferry.ShardSet(data)
    m = sset.manifest
    ar = np.arange(m.seq_len)
    rows = []
    for p in range(m.rows_per_rank * m.ranks):
        s, r = p % m.ranks, p // m.ranks
        cols, _ = sset.shard(s).span(r, 1)
        rows.append({
            "input_ids": torch.from_numpy(cols["input_ids"][0].astype(np.int64)),
            "attention_mask": torch.from_numpy((ar < cols["length"][0]).astype(np.int64)),
            "labels": torch.from_numpy(cols["labels"][0].astype(np.int64)),
        })
    return rows


def proc_cpu(pid):
    """CPU seconds of every thread of pid (schedstat: nanoseconds on CPU)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def start_daemon(exe, data, sock):
    t0 = time.perf_counter()
    p = subprocess.Popen([exe, "--data", data, "--socket", sock, "--quiet"])
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(sock)
            break
        except OSError:
            if p.poll() is not None or time.perf_counter() - t0 > 60:
                sys.exit(f"bench_serve: ferry-serve did not start (exit {p.poll()})")
            time.sleep(0.005)
        finally:
            s.close()
    return p, time.perf_counter() - t0


def run_epoch(make, daemon_pid=None):
    """(s to first batch incl. construction, s from iter() to first batch,
    client CPU s/batch, wall s/batch, daemon CPU s/batch, batches)."""
    t0 = time.perf_counter()
    loader = make()
    t1 = time.perf_counter()
    it = iter(loader)
    first = next(it)
    int(first["input_ids"][0, 0])
    t2 = time.perf_counter()
    d0 = proc_cpu(daemon_pid) if daemon_pid else 0.0
    c0, w0 = time.process_time(), time.perf_counter()
    n = 0
    for _ in it:
        n += 1
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    dcpu = proc_cpu(daemon_pid) - d0 if daemon_pid else 0.0
    if hasattr(loader, "close"):
        loader.close()
    n = max(n, 1)
    return t2 - t0, t2 - t1, cpu / n, wall / n, dcpu / n, n + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="dataprep output directory (default: synthetic shards)")
    ap.add_argument("--serve-bin", default=os.path.join(REPO, "bin", "ferry-serve"))
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--rows-per-rank", type=int, default=2048)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if not os.path.exists(a.serve_bin):
        subprocess.run([go(), "build", "-o", "bin/", "./cmd/ferry-serve"], cwd=REPO, check=True)

    tmp = tempfile.TemporaryDirectory(prefix="ferry-bench-serve-")
    data = a.data or make_synthetic(tmp.name, 2, 2 * a.rows_per_rank, a.seq_len)
    m = ferry.read_manifest(data)
    world = m.ranks
    sock = os.path.join(tmp.name, "serve.sock")
    daemon, daemon_start = start_daemon(a.serve_bin, data, sock)
    try:
        ds = DictRows(anchor_rows(data))

        def anchor():
            sampler = DistributedSampler(ds, num_replicas=world, rank=0, shuffle=True, seed=0)
            sampler.set_epoch(0)
            return DataLoader(ds, batch_size=a.batch_size, sampler=sampler, drop_last=True)

        def direct():
            return ferry.Loader(data, a.batch_size, rank=0, world_size=world, drop_last=True)

        def served():
            return ServeLoader(sock, a.batch_size, rank=0, world_size=world, drop_last=True, slots=a.slots)

        results = {}
        for name, make, pid in (("anchor_dataloader_distsampler", anchor, None), ("ferry_direct", direct, None),
                                ("ferry_serve", served, daemon.pid)):
            runs = [run_epoch(make, pid) for _ in range(a.repeat)]
            best = min(runs, key=lambda r: r[2])
            results[name] = {
                "first_batch_ms": round(min(r[0] for r in runs) * 1e3, 3),
                "first_batch_ms_cold": round(runs[0][0] * 1e3, 3),
                "first_batch_ms_from_iter": round(min(r[1] for r in runs) * 1e3, 3),
                "cpu_us_per_batch": round(best[2] * 1e6, 2),
                "wall_us_per_batch": round(best[3] * 1e6, 2),
                "batches": runs[0][5],
            }
            if pid:
                results[name]["daemon_cpu_us_per_batch"] = round(min(r[4] for r in runs) * 1e6, 2)
    finally:
        daemon.terminate()
        daemon.wait()
    an, fd, fs = (results[k] for k in ("anchor_dataloader_distsampler", "ferry_direct", "ferry_serve"))
    out = {
        "batch": [a.batch_size, m.seq_len],
        "world_size": world,
        "rows_per_rank": m.rows_per_rank,
        "slots": a.slots,
        "daemon_start_ms": round(daemon_start * 1e3, 1),
        "results": results,
        "per_batch_cpu_ratio_anchor_over_serve": round(an["cpu_us_per_batch"] / fs["cpu_us_per_batch"], 1),
        "per_batch_wall_ratio_anchor_over_serve": round(an["wall_us_per_batch"] / fs["wall_us_per_batch"], 1),
        "per_batch_cpu_ratio_anchor_over_direct": round(an["cpu_us_per_batch"] / fd["cpu_us_per_batch"], 1),
        "first_batch_ratio_anchor_over_serve": round(an["first_batch_ms"] / fs["first_batch_ms"], 1),
        "torch": torch.__version__,
    }
    print(f"{'feed':32s} {'1st batch ms':>12s} {'from iter ms':>12s} {'cpu us/b':>9s} {'wall us/b':>10s} "
          f"{'daemon us/b':>11s} {'batches':>7s}")
    for k, v in results.items():
        print(f"{k:32s} {v['first_batch_ms']:12.3f} {v['first_batch_ms_from_iter']:12.3f} "
              f"{v['cpu_us_per_batch']:9.2f} {v['wall_us_per_batch']:10.2f} "
              f"{v.get('daemon_cpu_us_per_batch', 0):11.2f} {v['batches']:7d}")
    print(f"per-batch client CPU: anchor / serve = {out['per_batch_cpu_ratio_anchor_over_serve']}x, "
          f"anchor / direct = {out['per_batch_cpu_ratio_anchor_over_direct']}x; "
          f"first batch: anchor / serve = {out['first_batch_ratio_anchor_over_serve']}x")
    print(json.dumps({"bench": out}))


if __name__ == "__main__":
    main()
