"""TRL-style chat dataset preparation, the anchor for dataprep --format chat
(make bench's "dataprep chat" jobs, bench/cmd/bench/jobs_chat.go): what
SFTTrainer's _prepare_dataset does with assistant_only_loss=True
(datasets.map of apply_chat_template(tokenize=True,
return_assistant_tokens_mask=True) with num_proc = cores, then labels =
input_ids where the mask is 1, else -100), written to OUT/trl.parquet.

    trl_chat_prep.py TOKENIZER_DIR TEMPLATE.jinja IN.jsonl OUT_DIR

Prints JSON: seconds, rows, peak_rss_mb (the larger of this process's and
its largest child's). It is compared with

    dataprep --format chat --input IN.jsonl --tokenizer TOKENIZER_DIR \\
        --chat-template TEMPLATE.jinja --labels generation --seq-len 4096 --ranks 16 ...

by

    trl_chat_prep.py check SHARD_DIR OUT_DIR

which checks that every conversation TRL prepared is in dataprep's shards
(pad or pack mode) with the same input_ids and labels, and no other."""
import glob
import json
import os
import resource
import sys
import time


def prepare(tok_dir, template, inp, out):
    import datasets
    import transformers

    t0 = time.time()
    tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
    with open(template, encoding="utf-8") as f:
        tok.chat_template = f.read()
    ds = datasets.load_dataset("json", data_files=inp, split="train", cache_dir=out + "/cache")

    def fn(ex):
        tools = ex.get("tools")
        if isinstance(tools, str):
            tools = json.loads(tools)
        o = tok.apply_chat_template(ex["messages"], tools=tools, tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True)
        ids = o["input_ids"]
        return {"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, o["assistant_masks"])]}

    ds = ds.map(fn, num_proc=os.cpu_count(), remove_columns=ds.column_names, load_from_cache_file=False)
    ds.to_parquet(out + "/trl.parquet")
    secs = time.time() - t0
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"seconds": secs, "rows": len(ds), "peak_rss_mb": rss / 1024}))


def lists(col):
    """A list column as (offsets, values) numpy arrays."""
    import pyarrow as pa

    import numpy as np

    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(a, pa.FixedSizeListArray):  # a shard's input_ids and labels: seq_len each
        return np.arange(len(a) + 1, dtype=np.int64) * a.type.list_size, a.flatten().to_numpy()
    off = a.offsets.to_numpy()
    return off - off[0], a.flatten().to_numpy()


def check(shards, out):
    import numpy as np
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    with open(os.path.join(shards, "manifest.json"), encoding="utf-8") as f:
        pack = json.load(f)["mode"] == "pack"
    t = pq.read_table(out + "/trl.parquet")
    t_off, t_ids = lists(t["input_ids"])
    _, t_lab = lists(t["labels"])
    n = len(t)
    seen = np.zeros(n, dtype=bool)
    files = sorted(glob.glob(os.path.join(shards, "rank-*.arrow")))
    if not files:
        sys.exit(f"{shards}: no rank-*.arrow")
    segs = 0
    for path in files:
        with ipc.open_file(path) as r:
            s = r.read_all()
        s_off, s_ids = lists(s["input_ids"])
        _, s_lab = lists(s["labels"])
        seg = s["segments"].combine_chunks()
        g_off = seg.offsets.to_numpy()
        sample = seg.values.field("sample").to_numpy()
        start = seg.values.field("start").to_numpy()
        length = seg.values.field("length").to_numpy()
        for row in range(len(s)):
            base = s_off[row]
            for k in range(g_off[row], g_off[row + 1]):
                i, a, m = int(sample[k]), base + int(start[k]), int(length[k])
                if i >= n:
                    sys.exit(f"{path} row {row}: sample {i}, TRL prepared {n} conversations")
                lo, hi = t_off[i], t_off[i + 1]
                if hi - lo != m or not np.array_equal(s_ids[a:a + m], t_ids[lo:hi]):
                    sys.exit(f"{path} row {row}: conversation {i}: input_ids differ from TRL's ({m} vs {hi - lo} ids)")
                want = t_lab[lo:hi].copy()
                got = s_lab[a:a + m]
                if pack:
                    want[0] = -100  # pack mode: no label at an example's first position
                if not np.array_equal(got, want):
                    j = int(np.flatnonzero(got != want)[0])
                    sys.exit(f"{path} row {row}: conversation {i}: labels differ from TRL's at token {j}")
                seen[i] = True
                segs += 1
    if not seen.all():
        sys.exit(f"{int((~seen).sum())} of TRL's {n} conversations are not in {shards} (first: {int(np.flatnonzero(~seen)[0])})")
    print(f"{n} conversations identical to TRL's (input_ids and labels; {segs} segments in {len(files)} shards)")


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(*sys.argv[2:4])
    else:
        prepare(*sys.argv[1:5])
