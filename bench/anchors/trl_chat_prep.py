"""TRL-style chat dataset preparation, the anchor for dataprep --format chat:
what SFTTrainer's _prepare_dataset does with assistant_only_loss=True
(datasets.map of apply_chat_template(tokenize=True,
return_assistant_tokens_mask=True) with num_proc = cores, then labels =
input_ids where the mask is 1, else -100), written to OUT/trl.parquet.

    trl_chat_prep.py TOKENIZER_DIR TEMPLATE.jinja IN.jsonl OUT_DIR

Prints JSON: seconds, rows, peak_rss_mb (the larger of this process's and
its largest child's). Compare with
    dataprep --format chat --input IN.jsonl --tokenizer TOKENIZER_DIR \
        --chat-template TEMPLATE.jinja --labels generation --seq-len 4096 --ranks 16 ...
(docs/chat.md, "Speed", has a measured run; not yet a make bench job)."""
import json, os, resource, sys, time
import datasets, transformers

tok_dir, template, inp, out = sys.argv[1:5]
t0 = time.time()
tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
tok.chat_template = open(template).read()
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
