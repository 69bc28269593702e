"""transformers' apply_chat_template(tokenize=False) over a chat file, the
anchor of make bench's "chat render" jobs (ferry's side: bench/chatrender).

    python bench/anchors/hf_render.py TOKENIZER_DIR DATE REPEAT CHAT_FILE [TEXTS_OUT]

CHAT_FILE is JSON or JSON Lines (zstd when it ends in .zst) of records with
"messages" or ShareGPT "conversations" (from/value mapped to role/content
as `dataprep render --help` documents). Every conversation is rendered
REPEAT times with strftime_now pinned to DATE. Prints the bench line
{"bench": {"render_s", "conversations", "conv_per_s"}} timed around the
rendering alone; TEXTS_OUT gets each text once as {"text": ...} per line.
"""
import datetime as _dt
import json
import sys
import time

import transformers
import transformers.utils.chat_template_utils as ctu

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
         "observation": "tool", "tool": "tool", "function_call": "assistant"}


def read_records(path):
    raw = open(path, "rb").read()
    if path.endswith(".zst"):
        import pyarrow as pa
        raw = pa.input_stream(path, compression="zstd").read()
    text = raw.decode("utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def conversation(rec):
    if "messages" in rec:
        msgs = rec["messages"]
    else:
        msgs = [{"role": ROLES[t["from"]], "content": t["value"]} for t in rec["conversations"]]
    if rec.get("system"):
        msgs = [{"role": "system", "content": rec["system"]}] + msgs
    tools = rec.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools) if tools else None
    return msgs, tools


def main():
    tok_dir, date, repeat, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    day = _dt.datetime.strptime(date, "%Y-%m-%d")

    class Pinned(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return day.replace(tzinfo=tz)

    ctu.datetime = Pinned
    tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
    convs = [conversation(r) for r in read_records(path)]
    texts = [None] * len(convs)
    t0 = time.perf_counter()
    for _ in range(repeat):
        for i, (msgs, tools) in enumerate(convs):
            texts[i] = tok.apply_chat_template(msgs, tools=tools, tokenize=False)
    secs = time.perf_counter() - t0
    if len(sys.argv) > 5:
        with open(sys.argv[5], "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    n = len(convs) * repeat
    print(json.dumps({"bench": {"render_s": secs, "conversations": n, "conv_per_s": n / secs}}))


if __name__ == "__main__":
    main()
