#!/usr/bin/env python3
"""Goldens for chattemplate/: transformers' apply_chat_template(tokenize=False)
over a conversation corpus, for every chat template under
testdata/chattemplate/ (the 12 tokenizer families and TRL's templates).

Run with the pinned test venv (scripts/setup-test-deps):

    $HOME/.cache/ferry/venv/bin/python scripts/gen-chattemplate-goldens.py

It reads the chat datasets in testdata/chat (to build the corpus)
and the families' tokenizer.json (to build a tokenizer object offline), and
writes testdata/chattemplate/corpus.jsonl.gz and goldens.jsonl.zst (zstd -19: its renders repeat far beyond gzip's window)
(deterministic: same inputs, same bytes), and re-renders the expected
results of the hand-written cases in testdata/chattemplate/semantics.json.

strftime_now is pinned to PINNED_NOW by replacing the datetime that
transformers' chat_template_utils calls; the Go test injects the same clock.
"""
import argparse
import datetime as _dt
import gzip
import json
import os
import random
import re
import subprocess
import sys

import transformers
import transformers.utils.chat_template_utils as ctu
from transformers import PreTrainedTokenizerFast

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "testdata", "chattemplate")
PINNED_NOW = _dt.datetime(2026, 1, 15, 10, 30, 45)


class _PinnedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return PINNED_NOW


ctu.datetime = _PinnedDatetime  # strftime_now reads it at call time

SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The special tokens TRL's templates are rendered with (they are not tied to one tokenizer).
TRL_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


def token_content(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def sharegpt_to_messages(turns):
    """ShareGPT from/value turns to messages (the same mapping as chattemplate.ShareGPT)."""
    roles = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
             "system": "system", "observation": "tool", "tool": "tool", "function_call": "assistant"}
    out = []
    for t in turns:
        role = roles[t["from"]]
        if t["from"] == "function_call":
            call = json.loads(t["value"])
            out.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]})
        else:
            out.append({"role": role, "content": t["value"]})
    return out


def reason_record(rec, parts_as_list):
    msgs = []
    for m in rec["messages"]:
        text = [p["value"] for p in m["content"] if p["type"] == "text"]
        reasoning = [p["value"] for p in m["content"] if p["type"] == "reasoning"]
        calls = [p["value"] for p in m["content"] if p["type"] == "tool_call"]
        msg = {"role": m["role"]}
        if parts_as_list:
            msg["content"] = [{"type": "text", "text": t} for t in text]
        else:
            msg["content"] = "".join(text)
        if reasoning:
            msg["reasoning_content"] = "".join(reasoning)
        if calls:
            msg["tool_calls"] = []
            for c in calls:
                c = json.loads(c)
                msg["tool_calls"].append({"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}})
        msgs.append(msg)
    return msgs


TESTDATA = os.path.join(REPO, "testdata")


def unzstd(path):
    """The text of a zstd file of the repository's testdata."""
    return subprocess.run(["zstd", "-dcq", path], check=True, capture_output=True).stdout.decode("utf-8")


def tokenizer_file(name):
    """testdata/tokenizers/NAME/tokenizer.json.zst, decompressed to a temp file."""
    import tempfile
    d = tempfile.mkdtemp(prefix="gen-chattemplate-")
    path = os.path.join(d, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(unzstd(os.path.join(TESTDATA, "tokenizers", name, "tokenizer.json.zst")))
    return path


def build_corpus():
    chat = os.path.join(TESTDATA, "chat")
    cases = []

    def add(cid, messages, tools=None, agp=False, kwargs=None, source=None):
        c = {"id": cid, "messages": messages, "tools": tools, "add_generation_prompt": agp, "kwargs": kwargs or {}}
        if source is not None:
            c["sharegpt"] = source
        cases.append(c)

    fast = json.loads(unzstd(os.path.join(chat, "fastchat-dummy", "dummy_conversation.json.zst")))
    for i in range(0, len(fast), 12):  # 42 of 500, every shape (2/4/6 turns)
        r = fast[i]
        add(f"fastchat/{r['id']}", sharegpt_to_messages(r["conversations"]), agp=(i % 24 == 0), source=r["conversations"])
    glaive = json.loads(unzstd(os.path.join(chat, "llamafactory-glaive", "glaive_toolcall_en_demo.json.zst")))
    for i in range(0, len(glaive), 7):  # 43 of 300
        r = glaive[i]
        tools = json.loads(r["tools"]) if r.get("tools") else None
        if tools == []:
            tools = None
        # glaive's tools are bare function schemas; wrap them as transformers documents.
        if tools:
            tools = [{"type": "function", "function": t} for t in tools]
        add(f"glaive/{i}", sharegpt_to_messages(r["conversations"]), tools=tools, source=r["conversations"])
    reason = [json.loads(l) for l in unzstd(os.path.join(chat, "llamafactory-reason", "reason_tool_use_demo_50.jsonl.zst")).splitlines() if l.strip()]
    for i, r in enumerate(reason):  # all 50; every 5th also with list-of-text-parts content
        tools = json.loads(r["tools"]) if r.get("tools") else None
        add(f"reason/{i}", reason_record(r, False), tools=tools)
        if i % 5 == 0:
            add(f"reason-parts/{i}", reason_record(r, True), tools=tools)
    stock = [json.loads(l) for l in unzstd(os.path.join(chat, "msfoundry-stock", "stock_toolcall_training.jsonl.zst")).splitlines() if l.strip()]
    for i in range(0, len(stock), 3):  # 29 of 86
        r = stock[i]
        add(f"stock/{i}", r["messages"], tools=r.get("tools"), agp=(i % 9 == 0))

    weather = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
                "parameters": {"type": "object", "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                    "threshold": {"type": "number", "description": "Alert threshold", "default": 1.0, "minimum": -0.5, "maximum": 1e-05},
                    "days": {"type": "integer", "default": 3}},
                    "required": ["city"]}}}]
    u = {"role": "user", "content": "Hello!"}
    a = {"role": "assistant", "content": "Hi there. How can I help?"}
    s = {"role": "system", "content": "You are a terse assistant."}
    add("hand/single-user", [u])
    add("hand/single-user-agp", [u], agp=True)
    add("hand/system-user-assistant", [s, u, a])
    add("hand/no-system-multi", [u, a, {"role": "user", "content": "And again?"}, {"role": "assistant", "content": "Again."}])
    add("hand/ends-with-user-agp", [s, u, a, {"role": "user", "content": "One more question."}], agp=True)
    add("hand/ends-with-user", [u, a, {"role": "user", "content": "One more question."}])
    add("hand/empty-content", [{"role": "system", "content": ""}, {"role": "user", "content": ""}, {"role": "assistant", "content": ""}])
    add("hand/unicode", [{"role": "system", "content": "Réponds en français. 日本語も。"},
                         {"role": "user", "content": "emoji 👩‍👩‍👧 and 你好 and line\u2028sep and \x1cfs and tab\tend  "},
                         {"role": "assistant", "content": "  straße İstanbul ǅ \u3000 ok \u00a0"}])
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "abc123XYZ", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "threshold": 0.5, "days": 2, "nested": {"z": 1, "a": [1.0, None, True]}}}}]}
    tool = {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"}
    add("hand/tool-call-dict-args", [u, call, tool, {"role": "assistant", "content": "It is 21.5 °C and clear."}], tools=weather)
    add("hand/tool-call-agp", [s, u, call, tool], tools=weather, agp=True)
    add("hand/tools-no-call", [s, u], tools=weather, agp=True)
    add("hand/reasoning", [u, {"role": "assistant", "content": "The answer is 4.", "reasoning_content": "2+2=4, simple."},
                           {"role": "user", "content": "Thanks"}, {"role": "assistant", "content": "Welcome.", "reasoning_content": "Be polite."}])
    add("hand/thinking-field", [u, {"role": "assistant", "content": "Done.", "thinking": "Let me think."}])
    add("hand/inline-think", [u, {"role": "assistant", "content": "<think>\nhidden\n</think>\n\nvisible answer"}])
    add("hand/null-keys", [{"role": "user", "content": "hi", "name": None}, {"role": "assistant", "content": "yo", "tool_calls": None}])
    add("hand/pinned-date", [u, a], kwargs={"date_string": "03 Feb 2025"})
    add("hand/enable-thinking-false", [u], agp=True, kwargs={"enable_thinking": False})
    add("hand/developer-reasoning-effort", [{"role": "developer", "content": "Be brief."}, u, a], kwargs={"reasoning_effort": "high"})
    add("hand/bad-alternation", [u, {"role": "user", "content": "twice"}])
    add("hand/long-turns", [m for _ in range(20) for m in (u, a)])
    return cases


def families():
    root = os.path.join(OUT, "families")
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
        jinja = os.path.join(d, "chat_template.jinja")
        template = open(jinja, encoding="utf-8").read() if os.path.exists(jinja) else cfg["chat_template"]
        special = {k: token_content(cfg[k]) for k in SPECIAL if cfg.get(k) is not None}
        tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file(name), **special)
        tok.chat_template = template
        yield f"family/{name}", tok, template


def check_trl_copies():
    """The TRL templates are copies (trl is not in python/requirements-test.lock);
    when trl is installed, say which copies differ from its files."""
    try:
        import trl
    except ImportError:
        print("trl not installed: using the copies in testdata/chattemplate/trl", file=sys.stderr)
        return
    src = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
    for name in sorted(os.listdir(os.path.join(OUT, "trl"))):
        p = os.path.join(src, name)
        if not os.path.exists(p) or open(p, encoding="utf-8").read() != open(os.path.join(OUT, "trl", name), encoding="utf-8").read():
            print(f"trl {trl.__version__}: {name} differs from the copy", file=sys.stderr)


def trl_templates():
    root = os.path.join(OUT, "trl")
    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file("qwen2.5"), **TRL_SPECIAL)
    for name in sorted(os.listdir(root)):
        if name.endswith(".jinja"):
            yield f"trl/{name[:-6]}", tok, open(os.path.join(root, name), encoding="utf-8").read()


def render(tok, template, case):
    kw = dict(case["kwargs"])
    text = tok.apply_chat_template(case["messages"], tools=case["tools"], add_generation_prompt=case["add_generation_prompt"],
                                   tokenize=False, chat_template=template, **kw)
    spans = None
    if "generation" in template and "{%" in template:
        conv = ctu._normalize_chat_messages(case["messages"])
        rendered, idx = ctu.render_jinja_template(conversations=[conv], tools=case["tools"], chat_template=template,
                                                  return_assistant_tokens_mask=True,
                                                  add_generation_prompt=case["add_generation_prompt"],
                                                  **{**tok.special_tokens_map, **kw})
        assert rendered[0] == text, "span render differs from apply_chat_template"
        spans = [list(s) for s in idx[0]]
    return text, spans


# --- random templates: a differential test of the lexer, parser, scoping and builtins ---

_WS = [" ", "  ", "\n", "\n\n", "\t", " \n ", "\r\n", "\u3000", "\x1c", "\u2028", "", "", "", "x", "y\n", " z "]
_EXPR = ["x", "y", "x ~ y", '"s p"', "' q '", "n + 1", "n / 2", "n // 3", "n % 4", "-n", "f", "f * 2", "none", "true", "xs",
         "xs|length", 'xs|join(",")', "d", "d.a", 'd["b"]', "d.zz", "xs[0]", "xs[-1]", "xs[1:]", "x.upper()", "y.strip()",
         "(x ~ y)|trim", "d|tojson", "d|tojson(indent=2)", "xs|tojson", "missing_name", "x if n > 1 else y", "x if n < 0",
         "n is odd", "x is string", "d is mapping", 'xs|map("upper")|list', "d|items|list", "y.split()", "x[::-1]", "n ** 2",
         "1e-5", "2.50", "7 // -2", "x * 2", '"%s-%s" % (x, n)', 'd.get("a")', "d.keys()|list", "x|title", "y|capitalize",
         '"α β".upper()', "xs|first", "xs|last", "[n, f, x]", '{"k": n}', 'x.startswith("a")', 'y.replace(" ", "_")',
         "xs|sort|list", "xs|reverse|list", "n|string", "f|int", "x|length", 'u|default("dd")', "ns.v", "ns.v ~ n",
         "m(x)", "m(n, b=f)", "loop_or_none", "y|indent(2)", "y|indent(2, true)", "d|dictsort", "xs|select('string')|list",
         "[ms, ms]|selectattr('role', 'equalto', 'user')|list|length", "ms.content|trim", "ms['role']", "ms.items()|list"]


def _random_template(rnd):
    def ws():
        return "".join(rnd.choice(_WS) for _ in range(rnd.randint(0, 3)))

    def ctl():
        return rnd.choice(["", "", "-", "+"])

    def ctlv():
        return rnd.choice(["", "", "-"])

    def block(depth):
        parts = []
        for _ in range(rnd.randint(1, 4)):
            k = rnd.random()
            e = rnd.choice(_EXPR)
            if k < 0.28 or depth > 2:
                parts.append(ws() + "{{" + ctlv() + " " + e + " " + ctlv() + "}}")
            elif k < 0.36:
                parts.append(ws() + "{#" + ctl() + " c " + ctl() + "#}" + ws())
            elif k < 0.5:
                parts.append(ws() + "{%" + ctl() + " if " + e + " " + ctl() + "%}" + block(depth + 1) + ws() +
                             ("{%" + ctl() + " elif " + rnd.choice(_EXPR) + " " + ctl() + "%}" + block(depth + 1) if rnd.random() < 0.3 else "") +
                             ("{%" + ctl() + " else " + ctl() + "%}" + block(depth + 1) if rnd.random() < 0.5 else "") +
                             ws() + "{%" + ctl() + " endif " + ctl() + "%}")
            elif k < 0.62:
                parts.append(ws() + "{%" + ctl() + " for i in xs " + rnd.choice(["", "", "if i != 'a' "]) + ctl() + "%}" + ws() +
                             "{{ loop.index }}{{ loop.first }}{{ loop.revindex }}" + block(depth + 1) + ws() +
                             ("{%" + ctl() + " else " + ctl() + "%}E" if rnd.random() < 0.2 else "") +
                             "{%" + ctl() + " endfor " + ctl() + "%}")
            elif k < 0.72:
                parts.append(ws() + "{%" + ctl() + " set " + rnd.choice(["x", "y", "n", "ns.v"]) + " = " + e + " " + ctl() + "%}")
            elif k < 0.78:
                parts.append(ws() + "{%" + ctl() + " set y " + ctl() + "%}" + block(depth + 1) + "{%" + ctl() + " endset " + ctl() + "%}")
            elif k < 0.84:
                parts.append(ws() + "{%" + ctl() + " generation " + ctl() + "%}" + block(depth + 1) + "{%" + ctl() + " endgeneration " + ctl() + "%}")
            elif k < 0.87:
                parts.append(ws() + "{%" + ctl() + " filter upper " + ctl() + "%}" + block(depth + 1) + "{%" + ctl() + " endfilter " + ctl() + "%}")
            elif k < 0.9:
                parts.append(ws() + rnd.choice([
                    "{%" + ctl() + " call(v) w(x) " + ctl() + "%}" + block(depth + 1) + "[{{ v }}]{%" + ctl() + " endcall " + ctl() + "%}",
                    "{%" + ctl() + " with x = " + e + ", z = n " + ctl() + "%}" + block(depth + 1) + "{{ z }}{%" + ctl() + " endwith " + ctl() + "%}",
                    "{% for i in xs %}{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('o', 'e') }}|{{ loop.length }}{% if loop.last %}{% break %}{% endif %}{% continue %}{% endfor %}",
                    "{% set ns.v = ns.v ~ x %}{% for i in xs %}{% set ns.v = ns.v ~ i %}{% endfor %}{{ ns.v }}",
                ]))
            else:
                parts.append(ws() + "{%" + ctl() + " raw " + rnd.choice(["", "-"]) + "%}" + ws() + "{{ r }}" + ws() + "{%" + ctl() + " endraw " + ctl() + "%}")
            parts.append(ws())
        return "".join(parts)

    head = ("{%- set ns = namespace(v=1) -%}{%- macro m(a, b=2) -%}<{{ a }}|{{ b }}|{{ x }}>{%- endmacro -%}"
            "{%- macro w(s) -%}({{ caller(s ~ '!') }}){%- endmacro -%}")
    return head + block(0)


_STRS = ["ǅemal ǆ", "straße ß", "İstanbul ı", "ΣΑΣ ὈΔΥΣΣΕΎΣ σς", "ﬁne ﬂow ŉ", "hello wORLD", "  a\u3000b\u2028 \x1c", "x\x1cy\x85z",
         "", "a,b,,c", "日本語テキスト", "😀 emoji ❤️", "they're 3rd-class (x)[y]{z}<w>", "a\tb\nc\r\nd\re\x0bf\x0cg\u2029h",
         "ǉubljana ǈ", "ﾟ ½ ² ⅷ ൧", "MiXeD cAsE wOrDs-AND_Under_score", "x\u0301e\u0301 combining", "\u00a0nbsp\u00a0",
         "ʼn", "ΐ ΰ", "ꭰ Ꭰ", "ﬀ ﬃ ﬅ", "Ǳ ǲ ǳ"]
_NUMS = ["0", "-7", "5", "1099511627776", "0.1", "1e16", "1e-7", "123456.789", "-0.0", "2.5", "1e22", "3.0", "1/3", "2**0.5",
         "10/4", "7.0//2", "-7.5%2", "0.1+0.2", "1e300*10", "100000000000000000.0", "1.5e-5", "12345678901234567.0"]
_STR_OPS = [".upper()", ".lower()", ".title()", ".capitalize()", ".strip()", ".lstrip()", ".rstrip()", ".split()",
            ".splitlines()", ".split(',')", ".split(' ', 1)", ".rsplit(None, 1)", ".startswith('a')", ".find('a')",
            ".count('a')", ".replace('a', 'b')", ".center(9)", ".zfill(5)", "|title", "|capitalize", "|upper", "|lower",
            "|trim", "|length", "|string", "|int", "|float", "|list", "|reverse", "|first", "|last", "|tojson",
            "|tojson(ensure_ascii=true)", "|indent(3)", "|center(9)", "[1:]", "[::-1]", "[-3:]", "[2]", ".strip('a ')",
            ".isupper()", ".islower()", ".isspace()", ".isdigit()", ".isalpha()", "|replace(' ', '')", ".partition(' ')"]
_NUM_OPS = ["", "|string", "|int", "|float", "|round", "|abs", "|tojson", " + 1", " * 3", " / 7", " // 2", " % 3", " ** 2",
            " - 0.5", " == 5", " < 2.5", "|string|length", " ~ ''"]


def _random_expr(rnd):
    if rnd.random() < 0.6:
        s = rnd.choice(_STRS)
        lit = json.dumps(s, ensure_ascii=False)
        return "{{ " + lit + rnd.choice(_STR_OPS) + rnd.choice(["", "", "|string", "|length"]) + " }}"
    a, b = rnd.choice(_NUMS), rnd.choice(_NUMS)
    return "{{ (" + a + ")" + rnd.choice(_NUM_OPS) + " }}|{{ [" + a + ", " + b + "] }}|{{ (" + a + ") " + rnd.choice(["+", "-", "*", "/", "//", "%"]) + " (" + b + ") }}"


def gen_random(n=3000, seed=26):
    rnd = random.Random(seed)
    v = {"x": "ab c", "y": " Hé llo  wörld ", "n": 5, "f": 2.5, "xs": ["b", "a", "c"], "d": {"b": 1.0, "a": [1, None]},
         "ms": {"role": "user", "content": " hi\n"}}
    with gzip.GzipFile(os.path.join(OUT, "random.jsonl.gz"), "wb", mtime=0) as f:
        for i in range(n):
            src = _random_template(rnd) if i % 2 == 0 else _random_expr(rnd)
            c = {"src": src}
            try:
                rendered, idx = ctu.render_jinja_template(conversations=[[]], chat_template=src, return_assistant_tokens_mask=True, **v)
                c["want"], c["spans"] = rendered[0], [list(s) for s in idx[0]]
            except Exception as e:
                c["err"] = f"{type(e).__name__}: {e}"
            f.write((json.dumps(c, ensure_ascii=False) + "\n").encode("utf-8"))
    return v


def regen_semantics():
    """Re-render testdata/chattemplate/semantics.json's cases (src, vars) with
    transformers' own jinja2 environment; "go" marks kept as they are."""
    path = os.path.join(OUT, "semantics.json")
    cases = json.load(open(path, encoding="utf-8"))
    for c in cases:
        c.pop("want", None)
        c.pop("err", None)
        try:
            # Object addresses (a printed generator) vary from run to run.
            c["want"] = re.sub(r" at 0x[0-9a-f]+", " at 0x…", ctu._cached_compile_jinja_template(c["src"]).render(**c["vars"]))
        except Exception as e:
            c["err"] = f"{type(e).__name__}: {e}"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.parse_args()
    check_trl_copies()
    regen_semantics()
    print("random.jsonl.gz vars:", json.dumps(gen_random(), ensure_ascii=False), file=sys.stderr)
    cases = build_corpus()
    with gzip.GzipFile(os.path.join(OUT, "corpus.jsonl.gz"), "wb", mtime=0) as f:
        for c in cases:
            f.write((json.dumps(c, ensure_ascii=False) + "\n").encode("utf-8"))
    n = errs = 0
    zst = subprocess.Popen(["zstd", "-q", "-19", "-f", "-o", os.path.join(OUT, "goldens.jsonl.zst")], stdin=subprocess.PIPE)
    with zst.stdin as f:
        for tname, tok, template in [*families(), *trl_templates()]:
            for c in cases:
                rec = {"template": tname, "case": c["id"]}
                try:
                    text, spans = render(tok, template, c)
                    rec["text"] = text
                    if spans is not None:
                        rec["spans"] = spans
                except Exception as e:  # the Go engine must fail too
                    rec["error"] = f"{type(e).__name__}: {e}"
                    errs += 1
                n += 1
                f.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
    if zst.wait() != 0:
        sys.exit(f"zstd exited {zst.returncode} writing goldens.jsonl.zst")
    print(f"transformers {transformers.__version__}: {len(cases)} conversations, {n} renders, {errs} errors", file=sys.stderr)


if __name__ == "__main__":
    main()
