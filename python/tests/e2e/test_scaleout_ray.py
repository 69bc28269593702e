"""ferry.ray on a real two-node Ray cluster on this machine (issue 18).

Ray's multi-node test cluster (``ray.cluster_utils.Cluster``): a head node
and a second node, each its own raylet and object store with 1 CPU, started
by this module and removed after it (only its own processes: no ``ray stop``
of the machine). ``ferry.ray.prepare`` runs ``dataprep --part I/4`` as Ray
tasks spread over both nodes and commits them. The workers find dataprep as
the package does (``$FERRY_DATAPREP``, set in the job's runtime env, is the
repository's ``cmd/dataprep`` built by the test).

Two failures, both real: a watcher thread finds the processes in /proc and

- SIGKILLs part 1's first ``dataprep`` process mid-run (it has used CPU
  time: it is loading the tokenizer, reading or tokenizing); the task
  fails with "killed by SIGKILL" and prepare runs the part again;
- SIGKILLs the Ray worker process that runs part 2's first try; its
  dataprep child dies with it (PR_SET_PDEATHSIG), Ray reports the worker
  lost, and prepare runs the part again.

The committed directory must be byte-identical to one ``dataprep`` run
with the same inputs and flags: every file, and manifest.json but for
``stats.seconds`` (a time; docs/parts.md). The input is a directory of four
files in four formats (JSON array, JSON Lines cut between records by the
parts, gzip JSON Lines, Parquet). Then again with the input as an s3://
prefix and the parts and the output on S3 (a local versitygw, as in the Go
tests), and with another N, a list of files and a separate parts directory:
the same bytes each time.

Marked e2e; it never skips: a missing tool is a failure, and so is a
dataprep without ``--part``.
"""

import contextlib
import gzip
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

import ferry
import ferry._commands
import ferry.ray
from helpers import REPO, RayTempDir, build_go_tool, versitygw

ALPACA_TINY = os.path.join(REPO, "testdata", "alpaca", "alpaca_tiny.json")
ALPACA_DEMO = os.path.join(REPO, "testdata", "alpaca", "alpaca_en_demo.json.zst")
TOKENIZER = os.path.join(REPO, "testdata", "tokenizers", "qwen2.5")
PARTS = 4
FLAGS = dict(tokenizer=TOKENIZER, seq_len=256, ranks=3, mode="pack", labels="mask-prompt", seed=7)
KILL_BINARY, KILL_WORKER = 1, 2  # part 1: its dataprep is killed; part 2: its Ray worker
CPU_BEFORE_KILL = 0.05  # seconds of CPU the victim has used when it is killed: mid-run (past Load)


e2e = pytest.mark.e2e


def flag_args(flags):
    return [a for k, v in flags.items() for a in ("--" + k.replace("_", "-"), str(v))]


# --- unit checks of the pieces that run on the driver ----------------------------

def test_import_ferry_does_not_import_ray():
    r = subprocess.run([sys.executable, "-c", "import sys, ferry; print('ray' in sys.modules)"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_input_patterns(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    assert ferry.ray._input_patterns(str(d)) == [str(d / "*")]
    assert ferry.ray._input_patterns(["s3://b/p/", "s3://b/x/*.parquet", "s3://b/k.jsonl"]) == [
        "s3://b/p/*", "s3://b/x/*.parquet", "s3://b/k.jsonl"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert ferry.ray._input_patterns("a/*.jsonl") == [str(tmp_path / "a" / "*.jsonl")]
    finally:
        os.chdir(cwd)
    with pytest.raises(ValueError):
        ferry.ray._input_patterns([])


def test_flags():
    assert ferry.ray._flags(dict(seq_len=128, split_long=True, drop_last=False, eos=None, mode="pack")) == [
        "--seq-len", "128", "--split-long", "--mode", "pack"]
    assert ferry.ray._flags(dict(tokenizer="s3://b/tok"))[1] == "s3://b/tok"
    assert ferry.ray._flags(dict(tokenizer="tok"))[1] == os.path.abspath("tok")
    with pytest.raises(TypeError, match="out="):
        ferry.ray._flags(dict(out="x"))


def test_find_command(tmp_path, monkeypatch):
    exe = tmp_path / "dataprep"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("FERRY_DATAPREP", str(exe))
    assert ferry._commands.find("dataprep") == str(exe)
    monkeypatch.setenv("FERRY_DATAPREP", str(tmp_path / "nope"))
    with pytest.raises(ferry._commands.CommandNotFoundError, match="FERRY_DATAPREP"):
        ferry._commands.find("dataprep")
    monkeypatch.delenv("FERRY_DATAPREP")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ferry._commands.sysconfig, "get_path", lambda *a: str(tmp_path / "no-scripts"))
    assert ferry._commands.find("dataprep") == str(exe)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(ferry._commands.CommandNotFoundError, match="pip install"):
        ferry._commands.find("dataprep")


# --- the cluster run ---------------------------------------------------------------

@pytest.fixture(scope="module")
def dataprep(tmp_path_factory):
    """cmd/dataprep of this tree ($FERRY_DATAPREP: a prebuilt one); it must
    have --part."""
    exe = os.environ.get("FERRY_DATAPREP")
    if not exe:
        try:
            exe = build_go_tool("cmd/dataprep", str(tmp_path_factory.mktemp("bin")))
        except RuntimeError as e:
            pytest.fail(f"ferry.ray's test needs dataprep: {e}")
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    if "--part" not in r.stdout + r.stderr:
        pytest.fail(f"{exe} has no --part I/N (issue 18's split runs): ferry.ray needs dataprep --part and commit")
    return exe


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One directory, four files in four formats, read in lexical order."""
    demo = json.loads(subprocess.run(["zstd", "-dcq", ALPACA_DEMO], check=True, capture_output=True).stdout)
    with open(ALPACA_TINY) as f:
        tiny = json.load(f)
    d = tmp_path_factory.mktemp("inputs")
    shutil.copy(ALPACA_TINY, d / "a-tiny.json")
    # The big plain JSONL, cut between records. 60 copies (51 MB) keep each
    # part busy for ~0.25 s of CPU with a compiled tokenizer cache (Load
    # is ~15 ms then), so the killer finds it mid-run: with the faster
    # tokenizer of issue 31, 40 copies were done in ~0.15 s of CPU, and a
    # fresh-clone run saw part 1 end before the killer's 0.15 s.
    with open(d / "b-demo-x60.jsonl", "w") as f:
        for r in demo * 60:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with gzip.open(d / "c-demo-x2.jsonl.gz", "wt") as f:
        for r in demo * 2:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    rows = demo + tiny
    pq.write_table(pa.table({k: [r.get(k, "") for r in rows] for k in ("instruction", "input", "output")}),
                   d / "d-demo.parquet")
    return str(d)


@pytest.fixture(scope="module")
def s3(inputs, tmp_path_factory):
    """A real S3 server (versitygw, POSIX back end, as the Go tests use) on
    127.0.0.1, bucket "ferry" holding the inputs under in/; its objects are
    plain files under root/ferry/, read back directly by the test."""
    root = tmp_path_factory.mktemp("s3")
    shutil.copytree(inputs, root / "ferry" / "in")
    with versitygw(root) as env:
        yield dict(env=env, bucket=root / "ferry")


@pytest.fixture(scope="module")
def cluster(dataprep, s3):
    """Two Ray nodes of 1 CPU each on this machine; the driver connected,
    with $FERRY_DATAPREP and the S3 server's settings in the job's
    environment."""
    from ray.cluster_utils import Cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    with RayTempDir() as tmp:
        yield from _cluster(Cluster, tmp, dataprep, s3)


def _cluster(Cluster, tmp, dataprep, s3):
    t0 = time.monotonic()
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, num_gpus=0, include_dashboard=False,
                                                          temp_dir=tmp.temp_dir))
    try:
        c.add_node(num_cpus=1, num_gpus=0)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=True,
                 runtime_env={"env_vars": {"FERRY_DATAPREP": dataprep, "RAY_USAGE_STATS_ENABLED": "0", **s3["env"]}})
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        assert len(nodes) == 2, ray.nodes()
        print(f"two-node Ray cluster up in {time.monotonic() - t0:.1f} s")
        yield dict(nodes=nodes)
    finally:
        ray.shutdown()
        c.shutdown()


def cpu_seconds(pid):
    """utime + stime of pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ppid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def alive(pid):
    return cpu_seconds(pid) is not None


class Killer(threading.Thread):
    """Watches /proc for the first try of part KILL_BINARY and of part
    KILL_WORKER (dataprep processes of exe with --part I/PARTS) and kills
    them, once each, when they have used CPU_BEFORE_KILL s of CPU."""

    def __init__(self, exe):
        super().__init__(daemon=True)
        self.exe = os.path.realpath(exe)
        self.stop = threading.Event()
        self.seen = set()
        self.found = {}  # part -> dataprep pid of its first try
        self.killed = {}  # part -> (dataprep pid, pid killed, its CPU seconds then)
        self.missed = {}  # part -> why it could not be killed
        self.errors = []
        self.sightings = []  # (time, part, pid) of every dataprep --part process seen

    def scan(self):
        # Keyed by (pid, start time): pids are reused quickly here, so a pid
        # seen as another process before may be dataprep now.
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                if stat[stat.index("(") + 1:stat.rindex(")")] != "dataprep":  # a Ray worker before its exec too
                    continue
                key = (name, stat.rsplit(")", 1)[1].split()[19])
                if key in self.seen:
                    continue
                if os.readlink(f"/proc/{name}/exe") != self.exe:
                    self.seen.add(key)
                    continue
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().decode().split("\0")
            except (OSError, ValueError, IndexError):
                continue
            if len(argv) < 2:  # in exec: comm is set before the arguments are
                continue
            self.seen.add(key)
            if "--part" in argv:
                part = int(argv[argv.index("--part") + 1].split("/")[0])
                self.sightings.append((time.monotonic(), part, int(name)))
                if part in (KILL_BINARY, KILL_WORKER) and part not in self.found:
                    self.found[part] = int(name)

    def run(self):
        try:
            while not self.stop.is_set() and len(self.killed) + len(self.missed) < 2:
                self.scan()
                for part, pid in self.found.items():
                    if part in self.killed or part in self.missed:
                        continue
                    cpu = cpu_seconds(pid)
                    if cpu is None:
                        self.missed[part] = f"dataprep pid {pid} ended before it had used {CPU_BEFORE_KILL} s of CPU"
                    elif cpu >= CPU_BEFORE_KILL:
                        victim = pid if part == KILL_BINARY else ppid_of(pid)
                        os.kill(victim, signal.SIGKILL)
                        self.killed[part] = (pid, victim, cpu)
                time.sleep(0.02)
        except Exception as e:  # reported by the test
            self.errors.append(repr(e))


@pytest.fixture(scope="module")
def run(cluster, dataprep, inputs, tmp_path_factory):
    """ferry.ray.prepare with the two kills, and one plain dataprep run with
    the same inputs and flags."""
    root = tmp_path_factory.mktemp("scaleout")
    out = str(root / "out")
    killer = Killer(dataprep)
    killer.start()
    log = io.StringIO()
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stderr(log):
            summary = ferry.ray.prepare(inputs, out, parts=PARTS, max_retries=2, **FLAGS)
    finally:
        killer.stop.set()
        killer.join(10)
        print(log.getvalue())
    ray_s = time.monotonic() - t0
    single = str(root / "single")
    t0 = time.monotonic()
    r = subprocess.run([dataprep, "--input", os.path.join(inputs, "*"), *flag_args(FLAGS), "--out", single, "--quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    print(f"ferry.ray.prepare ({PARTS} parts, 2 nodes, 2 kills): {ray_s:.1f} s; "
          f"one dataprep run: {time.monotonic() - t0:.1f} s")
    return dict(summary=summary, out=out, single=single, killer=killer, log=log.getvalue())


@e2e
def test_parts_ran_on_both_nodes(run, cluster):
    """Every node ran parts: the nodes parts finished on, and the node of
    part 1's killed first try (parts 0 and 1 start together, one per node:
    each node has 1 CPU)."""
    runs = run["summary"]["part_runs"]
    assert [r["part"] for r in runs] == list(range(PARTS))
    finished = [r["node_id"] for r in runs]
    killed_on = [f["node_id"] for f in runs[KILL_BINARY]["failures"]]
    assert None not in killed_on and len(killed_on) == 1, runs[KILL_BINARY]
    assert {finished[0], killed_on[0]} == set(cluster["nodes"]), (finished, killed_on)
    assert set(finished) | set(killed_on) == set(cluster["nodes"])
    print("parts finished on nodes", [x[:8] for x in finished], "; part 1's first try on", killed_on[0][:8])
    for r in runs:
        s = r["summary"]
        assert (s["part"], s["parts"]) == (r["part"], PARTS), s
    assert sum(r["summary"]["records"] for r in runs) == run["summary"]["records_read"]


@e2e
def test_killed_parts_were_retried(run):
    k = run["killer"]
    assert not k.errors, k.errors
    assert not k.missed, f"{k.missed}: make the input bigger so the parts run longer"
    assert sorted(k.killed) == [KILL_BINARY, KILL_WORKER], (k.killed, k.sightings)
    runs = run["summary"]["part_runs"]
    for part, (pid, victim, cpu) in k.killed.items():
        assert runs[part]["attempts"] == 2 and len(runs[part]["failures"]) == 1, runs[part]
        assert runs[part]["pid"] != pid
        assert not alive(pid), f"part {part}'s killed dataprep (pid {pid}) still runs"
    # the worker's death took its dataprep child with it (no orphan racing the retry)
    pid, worker, _ = k.killed[KILL_WORKER]
    assert worker != pid and not alive(worker)
    for part in set(range(PARTS)) - set(k.killed):
        assert runs[part]["attempts"] == 1 and runs[part]["failures"] == [], runs[part]
    assert "killed by SIGKILL" in runs[KILL_BINARY]["failures"][0]["error"]
    log = run["log"]
    assert re.search(rf"part {KILL_BINARY}/{PARTS} attempt 1 failed: .*killed by SIGKILL", log), log
    assert re.search(rf"part {KILL_WORKER}/{PARTS} attempt 1 failed: ", log), log
    assert f"part {KILL_WORKER}/{PARTS} done" in log and "committed" in log


def listing(d):
    out = []
    for dirpath, dirnames, filenames in os.walk(d):
        rel = os.path.relpath(dirpath, d)
        if rel == "parts":  # the parts (dataprep --parts default OUT/parts)
            dirnames[:] = []
            continue
        out += [os.path.normpath(os.path.join(rel, f)) for f in filenames]
    return sorted(out)


SECONDS = re.compile(rb'("seconds":\s*)[0-9.eE+-]+')


def assert_same_output(got, want):
    assert listing(got) == listing(want)
    assert "manifest.json" in listing(want) and any(f.endswith(".arrow") for f in listing(want))
    for name in listing(want):
        with open(os.path.join(got, name), "rb") as f:
            a = f.read()
        with open(os.path.join(want, name), "rb") as f:
            b = f.read()
        if name == "manifest.json":
            assert len(SECONDS.findall(a)) == 1
            a, b = SECONDS.sub(rb"\g<1>0", a), SECONDS.sub(rb"\g<1>0", b)
        assert a == b, f"{name} differs from the single run's"


@e2e
def test_committed_output_is_byte_identical_to_one_run(run):
    got = run["out"]
    assert os.listdir(os.path.join(got, "parts"))  # the parts were there, beside the result
    assert_same_output(got, run["single"])
    s = run["summary"]
    m = ferry.read_manifest(got)
    assert (m.ranks, m.seq_len, m.mode) == (FLAGS["ranks"], FLAGS["seq_len"], FLAGS["mode"])
    assert s["ranks"] == FLAGS["ranks"]


@e2e
def test_other_n_and_parts_dir_give_the_same_output(run, inputs, tmp_path):
    """N = 2 instead of 4, the inputs as a list of files instead of their
    directory, the parts in a directory of their own (--parts): the same
    bytes as the single run."""
    out, parts = str(tmp_path / "out"), str(tmp_path / "parts-elsewhere")
    files = [os.path.join(inputs, n) for n in sorted(os.listdir(inputs))]
    t0 = time.monotonic()
    s = ferry.ray.prepare(files, out, parts=2, parts_dir=parts, progress=False, **FLAGS)
    print(f"ferry.ray.prepare (2 parts, --parts elsewhere): {time.monotonic() - t0:.1f} s")
    assert [r["attempts"] for r in s["part_runs"]] == [1, 1]
    assert not os.path.exists(os.path.join(out, "parts"))
    assert sorted(os.listdir(parts)) == [f"part-0000{i}-of-00002.{ext}" for i in range(2) for ext in ("bin", "json")]
    assert_same_output(out, run["single"])


@e2e
def test_on_s3(cluster, dataprep, s3):
    """Inputs as an s3:// prefix, parts and output on S3 (the local test
    server): the same bytes as a single run from and to S3."""
    t0 = time.monotonic()
    s = ferry.ray.prepare("s3://ferry/in/", "s3://ferry/out", parts=3, progress=False, **FLAGS)
    print(f"ferry.ray.prepare on S3 (3 parts): {time.monotonic() - t0:.1f} s")
    assert s["input"].startswith("s3://ferry/in/a-tiny.json, ") and [r["attempts"] for r in s["part_runs"]] == [1] * 3
    assert sorted(os.listdir(s3["bucket"] / "out" / "parts")) == [
        f"part-0000{i}-of-00003.{ext}" for i in range(3) for ext in ("bin", "json")]
    r = subprocess.run([dataprep, "--input", "s3://ferry/in/*", *flag_args(FLAGS), "--out", "s3://ferry/single",
                        "--quiet"], capture_output=True, text=True, timeout=300, env=dict(os.environ, **s3["env"]))
    assert r.returncode == 0, r.stderr
    assert_same_output(str(s3["bucket"] / "out"), str(s3["bucket"] / "single"))


@e2e
def test_usage_error_fails_at_once_with_the_stderr_tail(cluster, inputs, tmp_path):
    """A bad flag is not retried: the first try's error, with dataprep's
    stderr, reaches the caller; no part and no output is committed."""
    out = str(tmp_path / "out")
    t0 = time.monotonic()
    with pytest.raises(ferry.ray.PartError) as e:
        ferry.ray.prepare(inputs, out, parts=2, max_retries=3, **dict(FLAGS, seq_len=0))
    assert e.value.returncode == 2
    assert "--seq-len 0" in str(e.value) and "usage error" in str(e.value)
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    print(f"usage error reported in {time.monotonic() - t0:.1f} s")


CHAT_REASON = os.path.join(REPO, "testdata", "chat", "llamafactory-reason", "reason_tool_use_demo_50.jsonl.zst")
CHAT_DUMMY = os.path.join(REPO, "testdata", "chat", "fastchat-dummy", "dummy_conversation.json.zst")
CHAT_FLAGS = dict(tokenizer=TOKENIZER, seq_len=1024, ranks=3, mode="pad", format="chat", labels="assistant",
                  date="2026-07-26", seed=7, on_bad_record="skip")


@e2e
def test_chat_data(cluster, dataprep, tmp_path):
    """Chat data (issue 27): plain JSON Lines the parts cut between records
    (some conversations long enough to be truncated or dropped at seq_len)
    and a compressed ShareGPT JSON file read whole, split in 3 parts with
    the chat template's date pinned: the same bytes as one dataprep run,
    loss labels and records_dropped included."""
    d = tmp_path / "chat"
    d.mkdir()
    reason = subprocess.run(["zstd", "-dcq", CHAT_REASON], check=True, capture_output=True).stdout
    (d / "a-reason-x4.jsonl").write_bytes(reason * 4)
    shutil.copy(CHAT_DUMMY, d / "b-dummy.json.zst")
    files = [str(d / n) for n in sorted(os.listdir(d))]
    out, single = str(tmp_path / "out"), str(tmp_path / "single")
    s = ferry.ray.prepare(files, out, parts=3, progress=False, **CHAT_FLAGS)
    assert [r["attempts"] for r in s["part_runs"]] == [1] * 3
    shares = [json.load(open(os.path.join(out, "parts", f"part-0000{i}-of-00003.json")))["share"] for i in range(3)]
    assert any(p["off"] > 0 for sh in shares for p in sh), shares  # a part read a byte range of the JSON Lines
    r = subprocess.run([dataprep, *[a for f in files for a in ("--input", f)], *flag_args(CHAT_FLAGS), "--out", single,
                        "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert_same_output(out, single)
    m = json.load(open(os.path.join(single, "manifest.json")))
    assert m["chat"]["date"] == "2026-07-26" and m["labels"] == "assistant", m
    assert m["stats"]["records_dropped"] > 0 and m["stats"]["records_truncated"] > m["stats"]["records_dropped"], m["stats"]


@e2e
def test_recipe(cluster, dataprep, tmp_path):
    """A mixture (issue 30): ferry.ray.prepare(None, out, recipe=...) runs
    the recipe's split run (every source's share per part) and gives one
    dataprep --recipe run's bytes."""
    recipe = tmp_path / "mix.yaml"
    recipe.write_text(f"sources:\n  - name: tiny\n    inputs: [{ALPACA_TINY}]\n    repeat: 2.5\n"
                      f"  - name: chat\n    inputs: [{CHAT_DUMMY}]\n    weight: 0.5\n")
    flags = dict(tokenizer=TOKENIZER, seq_len=512, ranks=3, mode="pack", date="2026-07-26", seed=7)
    out, single = str(tmp_path / "out"), str(tmp_path / "single")
    s = ferry.ray.prepare(None, out, parts=3, progress=False, recipe=str(recipe), **flags)
    assert [r["attempts"] for r in s["part_runs"]] == [1] * 3
    r = subprocess.run([dataprep, "--recipe", str(recipe), *flag_args(flags), "--out", single, "--quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert_same_output(out, single)
    m = json.load(open(os.path.join(single, "manifest.json")))
    assert m["version"] == 2 and [x["name"] for x in m["sources"]] == ["tiny", "chat"], m["sources"]
