#!/usr/bin/env python3
"""feed_anchors.py -- ferry.Loader against the streaming loaders people pick
for LLM fine-tuning data, one contestant per process (so the harness's peak
RSS is that contestant's own), same rows, same batch (4 x 1024).

Usage
  feed_anchors.py convert SIDE --records ALPACA.json --tokenizer DIR --eos EOS --out DIR [--dataprep BIN]
  feed_anchors.py read SIDE --data DIR [--batches N] [--shards DIR]

SIDE: ferry | mosaic | litdata | dataloader

convert  Alpaca records -> the side's format, timed whole (process start to
         the last byte written):
         ferry: `dataprep --mode pad --labels copy --ranks 1 --seq-len 1024`;
         mosaic: HF tokenizers encode_batch (all threads, 4,096 texts a
         call; truncation + padding to 1024, the seeds' prompt) + streaming.MDSWriter
         (columns input_ids, attention_mask, labels: ndarray:int32:1024);
         litdata: the same tokenization + litdata.optimize (one worker,
         64 MB chunks) over the same rows. dataloader has no format of its
         own (the seeds rebuild it in memory at every start).
read     rank 0 of world 1, batch 4, drop_last, shuffle, num_workers=0:
         ferry.Loader yields what the anchors yield: input_ids,
         attention_mask, labels (num_items_in_batch=False; with it on,
         its default, each batch costs a few µs more);
         first_batch_ms   constructing dataset + loader to holding batch 1;
         cpu_us_per_batch process CPU (all threads) per batch, batches
                          2..N+1;
         resume_ms        mid-epoch resume: a state saved after N/2
                          batches, loaded into a fresh dataset + loader, to
                          holding the next batch (mosaic and litdata: their
                          StreamingDataLoader.state_dict/load_state_dict;
                          ferry: Loader.state_dict/load_state_dict;
                          dataloader: no resume state, so skip N/2 batches
                          of a fresh DistributedSampler epoch, as
                          accelerate's skip_first_batches does);
         and checks that the resumed batch equals the batch the first pass
         saw at that position.
         dataloader reads the ferry shards (--data, a ferry directory) into
         a map-style dataset of int64 dict rows in memory first (the seeds'
         in-memory dataset, not timed in first_batch_ms).
Prints {"bench": {...}} last.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SEQ = 1024
BATCH = 4


def prompts(path, eos):
    with open(path, encoding="utf-8") as f:
        text = f.read().lstrip()
    recs = json.loads(text) if text.startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
    out = []
    for r in recs:
        p = f"### Instruction:\n{r.get('instruction', '')}\n\n"
        if r.get("input"):
            p += f"### Input:\n{r['input']}\n\n"
        out.append(f"{p}### Response:\n{r.get('output', '')}{eos}")
    return out


def tokenize(a):
    """The seeds' rows with HF tokenizers' fastest path: (ids, mask) int32."""
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    pad = tok.token_to_id(a.eos)
    tok.enable_truncation(SEQ)
    tok.enable_padding(length=SEQ, pad_id=pad, pad_token=a.eos)
    texts = prompts(a.records, a.eos)
    ids = np.empty((len(texts), SEQ), dtype=np.int32)
    mask = np.empty((len(texts), SEQ), dtype=np.int32)
    step = 4096  # bounded memory: 52k padded Encodings at once hold GBs
    for lo in range(0, len(texts), step):
        encs = tok.encode_batch(texts[lo:lo + step])
        ids[lo:lo + len(encs)] = [e.ids for e in encs]
        mask[lo:lo + len(encs)] = [e.attention_mask for e in encs]
    return ids, mask


def convert(a):
    t0 = time.perf_counter()
    shutil.rmtree(a.out, ignore_errors=True)
    info = {}
    if a.side == "ferry":
        cmd = [a.dataprep, "--input", a.records, "--tokenizer", a.tokenizer, "--eos", a.eos, "--seq-len", str(SEQ),
               "--ranks", "1", "--mode", "pad", "--labels", "copy", "--out", a.out, "--quiet"]
        subprocess.run(cmd, check=True)
        with open(os.path.join(a.out, "manifest.json")) as f:
            info["rows"] = json.load(f)["total_rows"]
    else:
        ids, mask = tokenize(a)
        t1 = time.perf_counter()
        info["tokenize_s"] = round(t1 - t0, 3)
        info["rows"] = len(ids)
        if a.side == "mosaic":
            from streaming import MDSWriter

            cols = {k: f"ndarray:int32:{SEQ}" for k in ("input_ids", "attention_mask", "labels")}
            with MDSWriter(out=a.out, columns=cols, size_limit="64mb", progress_bar=False) as w:
                for i in range(len(ids)):
                    w.write({"input_ids": ids[i], "attention_mask": mask[i], "labels": ids[i]})
        elif a.side == "litdata":
            import litdata

            n = len(ids)
            step = 4096

            def rows(start):
                for i in range(start, min(start + step, n)):
                    yield {"input_ids": ids[i], "attention_mask": mask[i], "labels": ids[i]}

            litdata.optimize(fn=rows, inputs=list(range(0, n, step)), output_dir=a.out, chunk_bytes="64MB",
                             num_workers=1, mode="overwrite", start_method="fork")
        else:
            sys.exit("feed_anchors: dataloader has no format of its own to convert to")
        info["write_s"] = round(time.perf_counter() - t1, 3)
    # every side's output on the disk before the clock stops
    for root, _, files in os.walk(a.out):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    info["convert_s"] = round(time.perf_counter() - t0, 3)
    info["bytes"] = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(a.out) for f in fs)
    return info


def make_reader(a):
    """() -> (loader, save(loader) -> state, restore(state) -> loader)."""
    import torch
    from torch.utils.data import DataLoader, Dataset, DistributedSampler

    if a.side == "ferry":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import ferry

        def make():
            # the same batch as the anchors': input_ids, attention_mask,
            # labels (num_items_in_batch, which they do not give, is off)
            return ferry.Loader(a.data, BATCH, rank=0, world_size=1, drop_last=True, num_items_in_batch=False)

        def restore(state):
            ld = make()
            ld.load_state_dict(state)
            return ld

        return make, lambda ld: ld.state_dict(), restore
    if a.side == "mosaic":
        from streaming import StreamingDataLoader, StreamingDataset

        def make():
            ds = StreamingDataset(local=a.data, batch_size=BATCH, shuffle=True, shuffle_seed=0)
            return StreamingDataLoader(ds, batch_size=BATCH, drop_last=True, num_workers=0)

        def restore(state):
            ld = make()
            ld.load_state_dict(state)
            return ld

        return make, lambda ld: ld.state_dict(), restore
    if a.side == "litdata":
        import litdata

        def make():
            ds = litdata.StreamingDataset(a.data, shuffle=True, seed=0, drop_last=True)
            return litdata.StreamingDataLoader(ds, batch_size=BATCH, drop_last=True, num_workers=0)

        def restore(state):
            ld = make()
            ld.load_state_dict(state)
            return ld

        return make, lambda ld: ld.state_dict(), restore
    # dataloader: the seeds' in-memory map-style dataset of int64 dict rows
    sys.path.insert(0, os.path.join(REPO, "python"))
    import numpy as np
    import ferry

    with ferry.ShardSet(a.data) as ss:
        m = ss.manifest
        sf = ss.shard(0)
        cols, _ = sf.span(0, m.rows_per_rank)
        ar = np.arange(m.seq_len)
        ids = torch.from_numpy(cols["input_ids"].astype(np.int64))
        lab = torch.from_numpy(cols["labels"].astype(np.int64))
        mask = torch.from_numpy((ar[None, :] < cols["length"][:, None]).astype(np.int64))
    rows = [{"input_ids": ids[i], "attention_mask": mask[i], "labels": lab[i]} for i in range(len(ids))]

    class Rows(Dataset):
        def __len__(self):
            return len(rows)

        def __getitem__(self, i):
            return rows[i]

    ds = Rows()

    def make():
        s = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0)
        s.set_epoch(0)
        return DataLoader(ds, batch_size=BATCH, sampler=s, drop_last=True)

    def restore(k):
        ld = make()
        it = iter(ld)
        for _ in range(k):
            next(it)
        return it

    return make, None, restore


def read(a):
    import torch

    torch.set_num_threads(1)
    t_import = time.perf_counter()
    make, save, restore = make_reader(a)
    t0 = time.perf_counter()
    ld = make()
    it = iter(ld)
    first = next(it)
    int(first["input_ids"][0, 0])
    ttfb = time.perf_counter() - t0
    half = max(1, a.batches // 2)
    c0 = time.process_time()
    n, want, state = 0, None, None
    for b in it:
        n += 1
        if n == half:
            state = save(ld) if save else n + 1  # state after batch n+1 (the first counts)
        if n == half + 1:
            want = b["input_ids"].clone()
        if n >= a.batches:
            break
    cpu = time.process_time() - c0
    del it
    t1 = time.perf_counter()
    rd = restore(state)
    got = next(iter(rd) if save else rd)["input_ids"]
    resume = time.perf_counter() - t1
    same = want is not None and got.shape == want.shape and bool((got.long() == want.long()).all())
    return {"first_batch_ms": round(ttfb * 1e3, 3), "cpu_us_per_batch": round(cpu / max(n, 1) * 1e6, 2),
            "resume_ms": round(resume * 1e3, 3), "batches": n + 1, "resumed_batch_equal": same,
            "resume_after_batches": half + 1, "setup_s": round(t0 - t_import, 3),
            "batch_shape": list(first["input_ids"].shape), "batch_dtype": str(first["input_ids"].dtype)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("phase", choices=["convert", "read"])
    ap.add_argument("side", choices=["ferry", "mosaic", "litdata", "dataloader"])
    ap.add_argument("--records")
    ap.add_argument("--tokenizer")
    ap.add_argument("--eos")
    ap.add_argument("--out")
    ap.add_argument("--dataprep")
    ap.add_argument("--data")
    ap.add_argument("--batches", type=int, default=1000, help="batches measured after the first (read)")
    a = ap.parse_args()
    if a.phase == "convert":
        if not (a.records and a.tokenizer and a.eos and a.out) or (a.side == "ferry" and not a.dataprep):
            ap.error("convert needs --records, --tokenizer, --eos, --out (and --dataprep for ferry)")
        res = convert(a)
    else:
        if not a.data:
            ap.error("read needs --data")
        res = read(a)
        if not res["resumed_batch_equal"]:
            print(json.dumps(res), file=sys.stderr)
            sys.exit(f"feed_anchors: {a.side}: the batch after resuming differs from the one the first pass saw")
    print(json.dumps({"side": a.side, "phase": a.phase, **res}))
    print(json.dumps({"bench": res}), flush=True)


if __name__ == "__main__":
    main()
