#!/usr/bin/env python3
"""seed_path.py -- the seeds' whole data path against ferry's, as every rank
of one node lives it at job start: time to the first batch on every rank,
CPU seconds of the node, peak memory of the node.

Usage
  seed_path.py seed  --records ALPACA.json --tokenizer DIR --ranks 8 --work DIR
  seed_path.py ferry --records ALPACA.json --tokenizer DIR --ranks 8 --work DIR --dataprep BIN

seed   RANKS processes start at once, as torchrun starts them; each runs
       what the torchrun + FSDP seed's main() runs before its first step,
       with the seed's own build_dataset (compiled from the verbatim copy
       python/tests/seeds/torchrun_fsdp/train.py, checked by sha256):
         tokenizer = AutoTokenizer.from_pretrained(model_dir)
         if tokenizer.pad_token is None: tokenizer.pad_token = tokenizer.eos_token
         dataset = build_dataset(tokenizer, dataset_name, max_seq_len)   # datasets
             # load_dataset + map(format_example): tokenizer(text, truncation,
             # max_length=1024, padding="max_length") per row, labels copy,
             # set_format("torch")
         sampler = DistributedSampler(dataset, num_replicas=RANKS, rank=rank, shuffle=True)
         loader = DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=True)
         sampler.set_epoch(0); first batch
       load_dataset("tatsu-lab/alpaca") is pointed at the local file (the
       hub is unreachable here) with datasets' own JSON builder and a cache
       dir that is fresh for each run and shared by the node's ranks (a new
       job on a fresh node). The model directory holds the fixture tokenizer
       with the base model's special tokens (Llama-3.1-8B: eos
       <|end_of_text|>, no pad). The model itself is not loaded (not data).
ferry  `dataprep --mode pad --labels copy --ranks RANKS --seq-len 1024` once
       (the same rows as the seed's build_dataset: test_seed_parity.py),
       then RANKS processes start at once, each ferry.Loader(out, 4,
       rank, RANKS, drop_last=True) and its first batch.

Time to first batch of a rank: from the start of this launcher to that
rank holding its first batch (so ferry's includes dataprep); also the data
path alone (data_path_s_max: from a rank's imports done to its first batch,
the slowest rank, plus dataprep for ferry). CPU seconds:
every process of the run (ranks, dataprep; user + system). Peak node
memory: the largest sum of the ranks' (and dataprep's) RSS, sampled every
20 ms. Prints {"bench": {...}} last.
"""

import argparse
import ast
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SEED = os.path.join(REPO, "python", "tests", "seeds", "torchrun_fsdp", "train.py")
SEED_SHA256 = "59427f5769e7cd17364cf2c395dc9111a79be9f58903698b66218cbe6e08322a"
MARKER = "# ---- end of header: below, the seed's text verbatim ----\n"
SEQ, BATCH = 1024, 4


def seed_build_dataset(load_dataset):
    """The seed's build_dataset and module constants, compiled from its own
    text, with load_dataset bound to the local shim."""
    with open(SEED, encoding="utf-8") as f:
        text = f.read()
    body = text[text.index(MARKER) + len(MARKER):]
    got = hashlib.sha256(body.encode("utf-8")).hexdigest()
    if got != SEED_SHA256:
        sys.exit(f"seed_path: {SEED} is no longer the seed's text (sha256 {got})")
    tree = ast.parse(body, filename=SEED)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_dataset"]
    ns = {"__name__": "seed_torchrun_fsdp"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), SEED, "exec"), ns)
    ns["load_dataset"] = load_dataset
    return ns["build_dataset"]


def rank_seed(a, rank, t0):
    import datasets
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    datasets.disable_progress_bars()
    a.t_imported = time.time()

    def load_dataset(name, split=None):
        assert name == "tatsu-lab/alpaca", name
        return datasets.load_dataset("json", data_files=a.records, split=split, cache_dir=a.cache)

    build_dataset = seed_build_dataset(load_dataset)
    # --- the seed's main(), its data path ---
    tokenizer = AutoTokenizer.from_pretrained(a.model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = build_dataset(tokenizer, "tatsu-lab/alpaca", SEQ)
    sampler = DistributedSampler(dataset, num_replicas=a.ranks, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, drop_last=True)
    sampler.set_epoch(0)
    batch = next(iter(loader))
    # ---
    # the rows the epoch goes through: DistributedSampler (drop_last=False)
    # pads the dataset to a multiple of the ranks, as dataprep does
    return batch, sampler.total_size


def rank_ferry(a, rank, t0):
    import torch

    sys.path.insert(0, os.path.join(REPO, "python"))
    import ferry

    torch.set_num_threads(1)
    a.t_imported = time.time()
    loader = ferry.Loader(a.out, BATCH, rank=rank, world_size=a.ranks, drop_last=True)
    batch = next(iter(loader))
    return batch, loader.manifest.total_rows


def rank_main(a):
    rank, t0 = a.rank, a.t0
    batch, rows = (rank_seed if a.side == "seed" else rank_ferry)(a, rank, t0)
    ids = batch["input_ids"]
    first = int(ids[0, 0])
    now = time.time()
    ttfb, data = now - t0, now - a.t_imported
    print(json.dumps({"rank": rank, "first_batch_s": round(ttfb, 3), "data_s": round(data, 3), "shape": list(ids.shape), "first_token": first,
                      "rows": rows, "tokens_in_batch": int(batch["attention_mask"].sum())}), flush=True)


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Samples the summed RSS of the live processes every 20 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.procs, self.peak_kb, self.stop = [], 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak_kb = max(self.peak_kb, sum(rss_kb(p.pid) for p in list(self.procs) if p.poll() is None))
            time.sleep(0.02)


def model_dir(a):
    """The fixture tokenizer with Llama-3.1-8B's special tokens."""
    d = os.path.join(a.work, "model")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(a.tokenizer, "tokenizer.json"), d)
    with open(os.path.join(a.tokenizer, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["eos_token"] = "<|end_of_text|>"
    cfg.pop("pad_token", None)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    return d


def launch(a):
    t0 = time.time()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    res = {"ranks": a.ranks}
    sampler = Sampler()
    sampler.start()
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="true")
    extra = []
    if a.side == "seed":
        extra = ["--model-dir", model_dir(a), "--cache", os.path.join(a.work, "hf-datasets")]
    else:
        out = os.path.join(a.work, "shards")
        p = subprocess.Popen([a.dataprep, "--input", a.records, "--tokenizer", a.tokenizer, "--eos", "<|end_of_text|>",
                              "--seq-len", str(SEQ), "--ranks", str(a.ranks), "--mode", "pad", "--labels", "copy",
                              "--out", out, "--quiet"], stdout=subprocess.DEVNULL)
        sampler.procs.append(p)
        if p.wait() != 0:
            sys.exit(f"seed_path: dataprep exited {p.returncode}")
        res["dataprep_s"] = round(time.time() - t0, 3)
        extra = ["--out", out]
    procs = []
    for r in range(a.ranks):
        p = subprocess.Popen([sys.executable, __file__, "rank", a.side, "--rank", str(r), "--ranks", str(a.ranks),
                              "--t0", repr(t0), "--records", a.records] + extra,
                             stdout=subprocess.PIPE, env=env, text=True)
        procs.append(p)
        sampler.procs.append(p)
    outs = []
    for r, p in enumerate(procs):
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"seed_path: {a.side} rank {r} exited {p.returncode}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.time() - t0
    sampler.stop.set()
    sampler.join()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    ttfb = [o["first_batch_s"] for o in outs]
    rows = {o["rows"] for o in outs}
    shapes = {tuple(o["shape"]) for o in outs}
    if shapes != {(BATCH, SEQ)} or len(rows) != 1:
        sys.exit(f"seed_path: ranks disagree: shapes {shapes}, rows {rows}")
    res.update({
        "first_batch_s_max": max(ttfb),
        # the data path alone: after each rank's imports (torch, transformers,
        # datasets; ferry) to its first batch, plus dataprep for ferry
        "data_path_s_max": round(max(o["data_s"] for o in outs) + res.get("dataprep_s", 0), 3), "first_batch_s_min": min(ttfb), "first_batch_s_ranks": ttfb,
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "peak_node_rss_mb": round(sampler.peak_kb / 1024, 1),
        "wall_s": round(wall, 3), "rows": rows.pop(), "tokens_first_batches": sum(o["tokens_in_batch"] for o in outs),
    })
    print(json.dumps({"side": a.side, **res}))
    print(json.dumps({"bench": res}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("role", nargs="?", choices=["rank"], help=argparse.SUPPRESS)
    ap.add_argument("side", choices=["seed", "ferry"])
    ap.add_argument("--records", required=True, help="Alpaca records (JSON array or JSONL)")
    ap.add_argument("--tokenizer", help="directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--work", help="scratch directory (emptied)")
    ap.add_argument("--dataprep", help="the dataprep binary (ferry)")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "rank":
        return rank_main(a)
    if not (a.tokenizer and a.work) or (a.side == "ferry" and not a.dataprep) or a.ranks < 1:
        ap.error("need --tokenizer, --work, --ranks >= 1 (and --dataprep for ferry)")
    launch(a)


if __name__ == "__main__":
    main()
