"""`dataprep --format chat` shards against transformers, live.

For each of the 12 tokenizer families and the chat files in testdata/chat
(every STRIDE-th record), the shard rows dataprep writes must hold:

- input_ids equal to ``apply_chat_template(tokenize=True)``;
- under ``--labels assistant``, labels equal to a Python reference of the
  rule in docs/chat.md, computed from transformers' render and HF
  tokenizers' offsets: for each assistant message, the region of the
  render that changes when its content is replaced by a sentinel (its
  tool calls and reasoning removed), trained from the first token
  overlapping it through the first added special token after it;
- under ``--labels generation`` with TRL's Qwen2.5 training template,
  labels equal to ``return_assistant_tokens_mask``.

Records transformers refuses are skipped by both (``--on-bad-record skip``).
"""
import json
import subprocess

import numpy as np
import pytest

from helpers import REPO, model_dir
from test_chat_render import (DATASETS, DATE, FAMILIES, dataprep, hf_tokenizer,  # noqa: F401 (fixtures)
                              pinned_clock, records, reference_messages)

pa = pytest.importorskip("pyarrow")
transformers = pytest.importorskip("transformers")

STRIDE = 8
SENTINEL = "\U0010FFFF"


def write_input(tmp_path, name, recs):
    p = tmp_path / f"{name}.jsonl"
    with open(p, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return p


def run_dataprep(dataprep, d, inp, out, labels, template=None):
    cmd = [dataprep, "--format", "chat", "--input", str(inp), "--tokenizer", str(d), "--out", str(out),
           "--labels", labels, "--mode", "pad", "--seq-len", "16384", "--date", DATE, "--on-bad-record", "skip",
           "--quiet", "--workers", "2"]
    if template:
        cmd += ["--chat-template", str(template)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode == 1 and "no conversation left to train on" in r.stderr:
        return {}  # every record refused (checked record by record)
    assert r.returncode == 0, r.stderr
    t = pa.ipc.open_file(str(out / "rank-00000-of-00001.arrow")).read_all()
    rows = {}
    for ids, lab, n, segs in zip(t["input_ids"].to_pylist(), t["labels"].to_pylist(), t["length"].to_pylist(),
                                 t["segments"].to_pylist()):
        rows[segs[0]["sample"]] = (ids[:n], lab[:n])
    return rows


def hf_call(tok, rec, **kw):
    tools = rec.get("tools") if isinstance(rec, dict) else None
    if isinstance(tools, str):
        tools = json.loads(tools)
    kwargs = (rec.get("chat_template_kwargs") or {}) if isinstance(rec, dict) else {}
    return reference_messages(rec), tools, kwargs


def reference_assistant_mask(tok, msgs, tools, kwargs, specials):
    """The --labels assistant rule, from transformers' renders and HF offsets."""
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, **kwargs)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offs = enc["input_ids"], enc["offset_mapping"]
    mask = [0] * len(ids)
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        alt = [dict(x) for x in msgs]
        alt[i] = {k: v for k, v in m.items() if k not in ("tool_calls", "reasoning_content", "thinking", "reasoning")}
        alt[i]["content"] = SENTINEL
        try:
            s = tok.apply_chat_template(alt, tools=tools, tokenize=False, **kwargs)
        except Exception:
            if "tool_calls" not in m:
                raise
            alt[i]["tool_calls"] = [sentinel_call(c) for c in m["tool_calls"]]
            s = tok.apply_chat_template(alt, tools=tools, tokenize=False, **kwargs)
        p = 0
        while p < len(text) and p < len(s) and text[p] == s[p]:
            p += 1
        q = 0
        while q < len(text) - p and q < len(s) - p and text[-1 - q] == s[-1 - q]:
            q += 1
        a, b = p, len(text) - q
        if SENTINEL not in s[p:len(s) - q] or a >= b:
            raise ValueError(f"the template writes nothing for assistant message {i}")  # ferry: a bad record
        first = next(k for k, (_, e) in enumerate(offs) if e > a)
        eot = next(k for k in range(first, len(ids)) if offs[k][1] > b and ids[k] in specials)
        for k in range(first, eot + 1):
            mask[k] = 1
    return ids, mask


def sentinel_call(c):
    """A tool call with its name the sentinel and its arguments empty."""
    c = dict(c)
    target = c
    if isinstance(c.get("function"), dict):
        target = c["function"] = dict(c["function"])
    target["name"] = SENTINEL
    if "arguments" in target:
        target["arguments"] = "{}" if isinstance(target["arguments"], str) else {}
    return c


def labels_of(ids, mask):
    return [t if m else -100 for t, m in zip(ids, mask)]


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_assistant_labels_match_reference(family, dataprep, tmp_path):  # noqa: F811
    d = model_dir(tmp_path, family)
    tok = hf_tokenizer(d)
    specials = {i for i, t in tok.added_tokens_decoder.items() if t.special}
    compared = refused = 0
    for name, path in DATASETS.items():
        recs = records(path)[::STRIDE]
        rows = run_dataprep(dataprep, d, write_input(tmp_path, name, recs), tmp_path / f"out-{name}", "assistant")
        for k, rec in enumerate(recs):
            where = f"{family} {name} record {k * STRIDE}"
            msgs, tools, kwargs = hf_call(tok, rec)
            try:
                want_ids = tok.apply_chat_template(msgs, tools=tools, tokenize=True, **kwargs)
            except Exception:
                assert k not in rows, f"{where}: transformers refused it, ferry wrote it"
                refused += 1
                continue
            if hasattr(want_ids, "keys"):
                want_ids = want_ids["input_ids"]
            try:
                ref_ids, mask = reference_assistant_mask(tok, msgs, tools, kwargs, specials)
            except ValueError:
                assert k not in rows, f"{where}: the template writes nothing for an assistant message; ferry wrote it"
                refused += 1
                continue
            assert k in rows, f"{where}: ferry skipped it"
            ids, labels = rows[k]
            assert ids == list(want_ids), f"{where}: input_ids differ"
            assert ref_ids == ids, f"{where}: encode(render) differs from apply_chat_template(tokenize=True)"
            assert labels == labels_of(ids, mask), f"{where}: labels differ at {np.flatnonzero(np.array(labels) != np.array(labels_of(ids, mask)))[:10]}"
            compared += 1
    assert compared > 20, (compared, refused)
    print(f"{family}: {compared} rows equal, {refused} refused by both")


@pytest.mark.parametrize("family,template", [("qwen2.5", "qwen2_5_training.jinja"), ("llama3.1", "llama3_training.jinja")])
def test_chat_generation_labels_match_transformers(family, template, dataprep, tmp_path):  # noqa: F811
    d = model_dir(tmp_path, family)
    tok = hf_tokenizer(d)
    tmpl = f"{REPO}/testdata/chattemplate/trl/{template}"
    with open(tmpl, encoding="utf-8") as f:
        tok.chat_template = f.read()
    compared = refused = 0
    for name, path in DATASETS.items():
        recs = records(path)[::STRIDE]
        rows = run_dataprep(dataprep, d, write_input(tmp_path, name, recs), tmp_path / f"gen-{name}", "generation", tmpl)
        for k, rec in enumerate(recs):
            where = f"{family} {name} record {k * STRIDE}"
            msgs, tools, kwargs = hf_call(tok, rec)
            try:
                out = tok.apply_chat_template(msgs, tools=tools, tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=True, **kwargs)
            except Exception:
                assert k not in rows, f"{where}: transformers refused it, ferry wrote it"
                refused += 1
                continue
            assert k in rows, f"{where}: ferry skipped it"
            ids, labels = rows[k]
            assert ids == list(out["input_ids"]), f"{where}: input_ids differ"
            assert labels == labels_of(ids, out["assistant_masks"]), f"{where}: labels differ"
            compared += 1
    assert compared > 20, (compared, refused)
    print(f"{family} {template}: {compared} rows equal, {refused} refused by both")


def test_chat_generation_labels_match_trl_sft_trainer(dataprep, tmp_path):  # noqa: F811
    """--labels generation with TRL's own Qwen2.5 training template (from
    the installed trl package) == the labels TRL 1.16's SFTTrainer prepares
    with assistant_only_loss=True (it swaps that template in for Qwen2.5's)."""
    trl = pytest.importorskip("trl")
    import importlib.resources

    import datasets
    import torch

    family = "qwen2.5"
    d = model_dir(tmp_path, family)
    tok = hf_tokenizer(d)
    tmpl = importlib.resources.files("trl") / "chat_templates" / "qwen2_5_training.jinja"
    recs = []
    for name in ("fastchat", "stock"):
        recs += [r for r in records(DATASETS[name])[::STRIDE]]
    inp = write_input(tmp_path, "trl", recs)
    rows = run_dataprep(dataprep, d, inp, tmp_path / "gen-trl", "generation", tmpl)
    kept = sorted(rows)
    examples = []
    for k in kept:
        msgs, tools, _ = hf_call(tok, recs[k])
        examples.append({"messages": msgs, "tools": json.dumps(tools) if tools else None})
    ds = datasets.Dataset.from_list(examples)
    cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg)
    args = trl.SFTConfig(output_dir=str(tmp_path / "trl-out"), assistant_only_loss=True, max_length=None,
                         report_to=[], dataset_num_proc=None, use_cpu=True, bf16=False)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    prepared = trainer.train_dataset
    assert len(prepared) == len(kept) > 20
    mismatches = 0
    for k, ex in zip(kept, prepared):
        ids, labels = rows[k]
        if ids != list(ex["input_ids"]) or labels != list(ex["labels"]):
            mismatches += 1
    assert mismatches == 0, f"{mismatches} of {len(kept)} rows differ from TRL's"
    print(f"TRL SFTTrainer {trl.__version__} qwen2.5: {len(kept)} rows equal")


QWEN3_REASONING = {"messages": [
    {"role": "system", "content": "Think, then answer."},
    {"role": "user", "content": "What is 17 * 3?"},
    {"role": "assistant", "reasoning_content": "FIRST-REASONING 17*3 = 51.", "content": "51."},
    {"role": "user", "content": "And the weather in Paris?"},
    {"role": "assistant", "reasoning_content": "SECOND-REASONING I need the weather tool.", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp_c\": 21}"},
    {"role": "assistant", "reasoning_content": "THIRD-REASONING 21 C is mild.", "content": "21 °C and mild."},
]}


def test_chat_qwen3_reasoning_rule(dataprep, tmp_path):  # noqa: F811
    """The Qwen3 template (TRL's copy, testdata/chattemplate/trl/qwen3.jinja,
    with the Qwen2.5 tokenizer, which shares Qwen3's vocabulary) drops the
    reasoning of assistant turns before the last user message and keeps it
    after (a tool-calling turn, the final answer). docs/chat.md's rule:
    what the template writes for a message is trained with it, so the
    first turn's reasoning is in neither the ids nor the labels, and the
    later turns' reasoning is trained with their replies. ferry's ids equal
    apply_chat_template(tokenize=True) and its labels the Python reference
    of the rule. The opening "<think>\n" differs by turn, as the rule says:
    the final turn gets "<think>\n\n</think>\n\n" even without reasoning
    (template text, untrained, like a role header), the tool-calling turn
    gets the block only for its reasoning (so it is trained whole)."""
    d = model_dir(tmp_path, "qwen2.5")
    tok = hf_tokenizer(d)
    template = f"{REPO}/testdata/chattemplate/trl/qwen3.jinja"
    with open(template, encoding="utf-8") as f:
        tok.chat_template = f.read()
    specials = {i for i, t in tok.added_tokens_decoder.items() if t.special}
    rows = run_dataprep(dataprep, d, write_input(tmp_path, "reason", [QWEN3_REASONING]), tmp_path / "out",
                        "assistant", template)
    ids, labels = rows[0]
    msgs, tools, kwargs = hf_call(tok, QWEN3_REASONING)
    want = tok.apply_chat_template(msgs, tokenize=True)
    assert ids == list(want["input_ids"] if hasattr(want, "keys") else want)
    ref_ids, mask = reference_assistant_mask(tok, msgs, tools, kwargs, specials)
    assert ref_ids == ids and labels == labels_of(ids, mask)
    text = tok.decode(ids)
    assert "FIRST-REASONING" not in text and "SECOND-REASONING" in text and "THIRD-REASONING" in text
    runs, cur = [], []
    for t, lab in zip(ids, labels):
        if lab != -100:
            cur.append(t)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    if cur:
        runs.append(tok.decode(cur))
    assert runs == [
        "51.<|im_end|>",
        '<think>\nSECOND-REASONING I need the weather tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
        "THIRD-REASONING 21 C is mild.\n</think>\n\n21 °C and mild.<|im_end|>",
    ], runs
