"""`dataprep render` against transformers' apply_chat_template, live.

For each of the 12 tokenizer families (its chat template, its special
tokens, its tokenizer.json) and the four real chat-format SFT files in
testdata/chat (ShareGPT, ShareGPT tool calls, LLaMA-Factory reasoning and
tool-call parts, OpenAI messages with tool calls), every record's
rendered text must be byte-identical to
``apply_chat_template(tokenize=False)`` and its input_ids equal to
``apply_chat_template(tokenize=True)``; a record transformers refuses (a
template's raise_exception) must be refused by ferry too.

The records reach transformers as a user's script would hand them over
after the documented mapping of `dataprep render --help` (ShareGPT
from/value to messages; LLaMA-Factory's {"type", "value"} parts to content,
reasoning_content and tool_calls; a tools JSON string parsed): that
mapping, written here in Python, is the reference the Go reader is checked
against.
"""
import datetime as _dt
import json
import os
import subprocess

import pytest

from helpers import REPO, build_go_tool, model_dir, read_maybe_zstd

transformers = pytest.importorskip("transformers")
ctu = pytest.importorskip("transformers.utils.chat_template_utils")

FAMILIES = ["deepseek-r1", "gpt-oss", "llama2", "llama3.1", "mistral-nemo", "mistral-v0.3", "olmo2", "phi3", "phi4",
            "qwen2.5", "smollm2", "tinyllama"]
CHAT = os.path.join(REPO, "testdata", "chat")
DATASETS = {
    "fastchat": os.path.join(CHAT, "fastchat-dummy", "dummy_conversation.json.zst"),
    "glaive": os.path.join(CHAT, "llamafactory-glaive", "glaive_toolcall_en_demo.json.zst"),
    "reason": os.path.join(CHAT, "llamafactory-reason", "reason_tool_use_demo_50.jsonl.zst"),
    "stock": os.path.join(CHAT, "msfoundry-stock", "stock_toolcall_training.jsonl.zst"),
}
# Every STRIDE-th record of each file (all shapes occur in each slice):
# 12 families x ~300 records x 2 calls of apply_chat_template.
STRIDE = 4
DATE = "2026-07-26"
SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
         "observation": "tool", "tool": "tool", "function_call": "assistant"}


class _PinnedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return _dt.datetime(2026, 7, 26, tzinfo=tz)


@pytest.fixture(scope="module")
def dataprep(tmp_path_factory):
    return build_go_tool("cmd/dataprep", str(tmp_path_factory.mktemp("bin")))


@pytest.fixture(scope="module", autouse=True)
def pinned_clock():
    saved = ctu.datetime
    ctu.datetime = _PinnedDatetime  # strftime_now reads it at call time; dataprep gets --date
    yield
    ctu.datetime = saved


def hf_tokenizer(d):
    with open(d / "tokenizer_config.json", encoding="utf-8") as f:
        cfg = json.load(f)
    special = {}
    for k in SPECIAL:
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            special[k] = v
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), **special)
    jinja = d / "chat_template.jinja"
    tok.chat_template = jinja.read_text(encoding="utf-8") if jinja.exists() else cfg["chat_template"]
    return tok


def reference_messages(rec):
    """The documented mapping of a record to apply_chat_template's input."""
    msgs = rec if isinstance(rec, list) else rec.get("messages", rec.get("conversations"))
    out = []
    if isinstance(rec, dict) and rec.get("system") and not (msgs and msgs[0].get("role") == "system"):
        out.append({"role": "system", "content": rec["system"]})
    for m in msgs:
        if "from" in m:
            if m["from"] == "function_call":
                call = json.loads(m["value"])
                out.append({"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]})
            else:
                out.append({"role": ROLES[m["from"]], "content": m["value"]})
            continue
        content = m.get("content")
        if isinstance(content, list) and any("value" in p and "text" not in p for p in content):
            msg = {k: v for k, v in m.items()}
            msg["content"] = "".join(p["value"] for p in content if p["type"] == "text")
            reasoning = "".join(p["value"] for p in content if p["type"] == "reasoning")
            calls = [json.loads(p["value"]) for p in content if p["type"] == "tool_call"]
            if reasoning:
                msg["reasoning_content"] = reasoning
            if calls:
                msg["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in calls]
            out.append(msg)
        else:
            out.append(m)
    return out


def records(path):
    text = read_maybe_zstd(path).decode("utf-8")
    if path.endswith(".jsonl.zst"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def hf_render(tok, rec):
    """(text, ids) from transformers, or ("error", message)."""
    tools = rec.get("tools") if isinstance(rec, dict) else None
    if isinstance(tools, str):
        tools = json.loads(tools)
    kwargs = rec.get("chat_template_kwargs") or {} if isinstance(rec, dict) else {}
    msgs = reference_messages(rec)
    try:
        text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, **kwargs)
        ids = tok.apply_chat_template(msgs, tools=tools, tokenize=True, **kwargs)
    except Exception as e:  # the template's raise_exception (TemplateError) or a jinja2 error
        return "error", f"{type(e).__name__}: {e}"
    if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return text, list(ids)


def first_diff(a, b):
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at {i}: ferry {a[max(0, i - 40):i + 40]!r}, transformers {b[max(0, i - 40):i + 40]!r}"


@pytest.mark.parametrize("family", FAMILIES)
def test_render_equals_apply_chat_template(family, dataprep, tmp_path):
    d = model_dir(tmp_path, family)
    tok = hf_tokenizer(d)
    compared = errors = 0
    for name, path in DATASETS.items():
        recs = records(path)[::STRIDE]
        inp = tmp_path / f"{name}.jsonl"
        with open(inp, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        r = subprocess.run([dataprep, "render", "--tokenizer", str(d), "--date", DATE, "--on-bad-record", "skip",
                            str(inp)], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        got = [json.loads(line) for line in r.stdout.splitlines()]
        assert [g["record"] for g in got] == list(range(len(recs))), f"{name}: records out of order or missing"
        for g, rec in zip(got, recs):
            where = f"{family} {name} record {g['record'] * STRIDE}"
            text, ids = hf_render(tok, rec)
            if text == "error":
                assert "error" in g, f"{where}: transformers refused it ({ids}), ferry rendered it"
                errors += 1
                continue
            assert "error" not in g, f"{where}: ferry refused it ({g['error']}), transformers rendered it"
            assert g["text"] == text, f"{where}: {first_diff(g['text'], text)}"
            assert g["input_ids"] == ids, f"{where}: input_ids {first_diff(g['input_ids'], ids)}"
            compared += 1
    assert compared > 100, (compared, errors)
    print(f"{family}: {compared} records identical, {errors} refused by both")


def test_render_names_file_and_record_of_a_bad_record(dataprep, tmp_path):
    d = model_dir(tmp_path, "qwen2.5")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
                   '{"messages": [{"role": "user", "content": [{"type": "image", "image": "x.png"}]}]}\n'
                   '{"messages": [{"role": "user", "content": "hi"}], "tools": "[{not json"}\n', encoding="utf-8")
    r = subprocess.run([dataprep, "render", "--tokenizer", str(d), str(bad)], capture_output=True, text=True)
    assert r.returncode == 1
    assert f"{bad}: record 1" in r.stderr and "messages[0].content[0]" in r.stderr and "text only" in r.stderr, r.stderr
    assert r.stdout == ""  # nothing written before the whole input was read

    r = subprocess.run([dataprep, "render", "--tokenizer", str(d), "--on-bad-record", "skip", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["record"] for x in lines] == [0, 1, 2]
    assert "text" in lines[0] and "error" in lines[1] and "tools" in lines[2]["error"], lines


def test_render_raise_exception_names_record_and_message(dataprep, tmp_path):
    d = model_dir(tmp_path, "llama2")  # its template raises on roles that do not alternate
    inp = tmp_path / "two-users.json"
    inp.write_text(json.dumps([{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
                               {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}]))
    r = subprocess.run([dataprep, "render", "--tokenizer", str(d), str(inp)], capture_output=True, text=True)
    assert r.returncode == 1
    assert f"{inp}: record 1" in r.stderr and "alternate" in r.stderr, r.stderr
