"""dataprep on a Ray cluster: the input's parts as Ray tasks, then one commit.

``import ferry.ray`` needs Ray (``import ferry`` never imports it)::

    import ray, ferry.ray

    ray.init()                                   # or address="auto", "ray://..."
    summary = ferry.ray.prepare(
        "s3://bucket/alpaca/",                   # a prefix, a glob, a file or a list of them
        "s3://bucket/shards/alpaca-qwen-1024-r16/",
        tokenizer="/models/Qwen2.5-3B", seq_len=1024, ranks=16, mode="pack", labels="mask-prompt")
    print(summary["ranks"], summary["total_rows"])

What it runs, with the ``dataprep`` binary of the ferry wheel on each node
(found as :func:`ferry._commands.find` says: ``$FERRY_DATAPREP``, the
environment's scripts directory, then PATH; or ``binary=``):

1. ``dataprep --part I/N --input ... --out OUT [flags] --json`` for
   I = 0..N-1, one Ray task each (``num_cpus=num_cpus_per_part``,
   ``scheduling_strategy="SPREAD"``: over the cluster's nodes). Each part
   reads only its share of the input (whole files, or byte ranges of one
   big JSONL at record boundaries), tokenizes it and writes its part under
   ``OUT/parts/`` (or ``parts_dir``) atomically: exit 0 means the part is
   whole, and a run of the same part replaces what an earlier try left.
2. A failed part is run again, up to ``max_retries`` times: a nonzero exit
   of dataprep (its stderr tail is in the error), its process killed, or its
   Ray worker or node lost (dataprep is started with ``PR_SET_PDEATHSIG``, so
   it dies with the worker; no orphan keeps writing). A usage error (exit 2)
   is not retried.
3. ``dataprep commit OUT [--parts LOC] --json``, as one more Ray task: it
   checks that every part is present and whole, then writes OUT's per-rank
   shards and ``manifest.json``, byte for byte what one ``dataprep`` run
   with the same inputs and flags writes (the run-time fields aside).

Every node must see ``OUT`` and the parts: an ``s3://`` prefix, or a shared
file system mounted at the same path everywhere (local paths are made
absolute on the driver). A node's local disk works only on a one-node
cluster. The parts stay where they are after the commit (delete them when
the result is checked); give each run its own parts location, since a
location that holds parts of another N makes the commit fail.

Progress: each part's dataprep progress lines (``dataprep[part 2/8]:
tokenize ...``) go to its task's stderr, which Ray shows on the driver
(``ray.init(log_to_driver=True)``, the default); the driver prints a line
per finished, failed or retried part with the running totals, then the
commit's. ``progress=False`` silences both (dataprep ``--quiet``).
"""

import collections
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import ray

from . import _commands
from .errors import FerryError

__all__ = ["PartError", "prepare"]

# dataprep's exit status for bad usage: the same flags fail on every node.
EXIT_USAGE = 2
# options that prepare() sets itself
_RESERVED = {"input", "out", "part", "parts", "json", "quiet"}
# options that hold a local path the workers must see as the driver does
_PATH_OPTIONS = {"tokenizer", "template", "cpuprofile", "recipe"}
_TAIL_LINES = 40


class PartError(FerryError, RuntimeError):
    """A dataprep run in a Ray task failed: a part, or the commit. ``args``
    are (message, returncode, stderr tail, node id) so that it crosses Ray
    intact; ``node_id`` is the Ray node it ran on."""

    def __init__(self, message, returncode=None, stderr_tail="", node_id=None):
        super().__init__(message, returncode, stderr_tail, node_id)
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        self.node_id = node_id

    def __str__(self):
        return self.args[0]

    @property
    def retriable(self):
        return self.returncode != EXIT_USAGE


def _local(p):
    p = os.fspath(p)
    return p if p.startswith("s3://") else os.path.abspath(p)


def _input_patterns(inputs):
    """What goes to dataprep's --input: a local path made absolute, a
    directory or an s3:// prefix ending in "/" turned into the glob of the
    files directly in it (dataprep expands globs, locally and on S3, in
    lexical order)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    out = []
    for p in map(os.fspath, inputs):
        if p.startswith("s3://"):
            out.append(p + "*" if p.endswith("/") else p)
            continue
        a = os.path.abspath(p)
        out.append(os.path.join(a, "*") if os.path.isdir(a) else a)
    if not out:
        raise ValueError("ferry.ray.prepare: no inputs")
    return out


def _flags(options):
    """dataprep flags from keyword options: seq_len=1024 -> --seq-len 1024,
    split_long=True -> --split-long; False and None are left out; a list
    repeats the flag."""
    args = []
    for k, v in options.items():
        if k in _RESERVED:
            raise TypeError(f"ferry.ray.prepare: {k}= is set by prepare itself")
        if v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        if v is True:
            args.append(flag)
            continue
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            x = os.fspath(x) if isinstance(x, os.PathLike) else str(x)
            if k in _PATH_OPTIONS and not x.startswith("s3://"):
                x = os.path.abspath(x)
            args += [flag, x]
    return args


def _die_with_parent_fn():
    """A preexec_fn that asks Linux to SIGKILL the child when the Ray
    worker that started it dies (killed, OOM, node lost), so a retried part
    never races an orphan of the earlier try. Resolved before the fork: the
    child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def fn():
        prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the worker died before prctl
            os._exit(1)
    return fn


def _run_dataprep(binary, args, label, progress):
    """Runs dataprep with args in this Ray worker; its stderr goes to the
    task's stderr as it comes (Ray shows it on the driver). Returns the
    --json summary with where it ran; raises PartError on a nonzero exit."""
    exe = binary or _commands.find("dataprep")
    t0 = time.monotonic()
    proc = subprocess.Popen([exe, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_die_with_parent_fn())
    tail = collections.deque(maxlen=_TAIL_LINES)

    def pump():
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            tail.append(line)
            if progress:
                print(line, file=sys.stderr, flush=True)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    out = proc.stdout.read().decode("utf-8", "replace")
    rc = proc.wait()
    t.join()
    node = ray.get_runtime_context().get_node_id()
    where = f"{socket.gethostname()} (node {node[:8]}, pid {proc.pid})"
    if rc != 0:
        if rc < 0:
            try:
                how = f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        else:
            how = f"exited {rc}"
        stderr = "\n".join(tail)
        raise PartError(f"{label}: {exe} {how} on {where}\n  command: {exe} {' '.join(args)}\n"
                        f"  stderr (last {len(tail)} lines):\n{stderr}", rc, stderr, node)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        summary = json.loads(lines[-1])
    except (IndexError, ValueError) as e:
        raise PartError(f"{label}: {exe} exited 0 on {where} but printed no JSON summary on stdout "
                        f"({out[-500:]!r}): {e}", 0, "\n".join(tail), node) from None
    return {"summary": summary, "node_id": node, "host": socket.gethostname(), "pid": proc.pid,
            "seconds": time.monotonic() - t0}


_remote_run = ray.remote(_run_dataprep)


def _default_parts(num_cpus_per_part):
    """One part per num_cpus_per_part CPUs of the cluster, at least one per
    alive node."""
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    cpus = ray.cluster_resources().get("CPU", 1)
    return max(1, nodes, int(cpus // num_cpus_per_part))


def _fmt_count(n):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(int(n))


def prepare(inputs, out, *, parts=None, dataprep_args=(), num_cpus_per_part=1, max_retries=3, parts_dir=None,
            binary=None, progress=True, ray_options=None, **options):
    """Runs ``dataprep`` over the Ray cluster as N parts, then commits them
    into OUT; returns the commit's ``--json`` summary (a dict) with one
    more key, ``"part_runs"``: per part, the node it finished on, its host,
    dataprep's pid, the attempts it took, its seconds, its own summary and
    its failed attempts (``failures``: attempt, error line, the node when
    known; a lost worker's is not).

    Args:
        inputs: the input files: a path or ``s3://`` key, a glob
            (``"s3://b/alpaca/train-*.parquet"``; dataprep expands it, in
            lexical order), a local directory or an ``s3://`` prefix ending
            in ``/`` (every file directly in it), or a list of these, read
            in the order given (as ``--input`` repeated). None with
            ``recipe=`` (a mixture, docs/mixtures.md: the recipe names each
            source's inputs; every node must see it and them).
        out: the output directory or ``s3://`` prefix (dataprep ``--out``);
            every node must see it (see the module doc).
        parts: N, the number of parts (default: one per
            ``num_cpus_per_part`` CPUs of the cluster, at least one per
            alive node). The output does not depend on N.
        dataprep_args: more dataprep flags, as strings.
        num_cpus_per_part: the Ray CPUs each part (and the commit) holds;
            also their ``--workers`` unless ``workers=`` is given.
        max_retries: how many times a failed part is run again.
        parts_dir: where the parts go (dataprep ``--parts``; default
            ``OUT/parts/``).
        binary: the dataprep executable to run on every node (default:
            the wheel's, found on each node).
        progress: print per-part and total progress on the driver and
            stream dataprep's progress lines; False passes ``--quiet``.
        ray_options: more ``.options()`` for the tasks (``memory``,
            ``resources``, ``runtime_env``...).
        **options: dataprep flags by name: ``tokenizer=``, ``seq_len=``,
            ``ranks=``, ``mode=``, ``labels=``, ``seed=``, ``eos=``,
            ``split_long=True``, ``force=True``... (``force`` goes to the
            commit too). Chat data takes ``format="chat"``,
            ``labels="assistant"`` (or another chat policy),
            ``chat_template=`` and ``date="YYYY-MM-DD"``: give ``date``, or
            parts that run on different days (or in other time zones)
            render different dates, and commit refuses them.

    Raises:
        PartError: a part failed ``max_retries + 1`` times (or with a
            usage error), or the commit failed; the message holds
            dataprep's stderr tail. Ray's own errors (a lost node on the
            last try) come through as they are.
    """
    if not ray.is_initialized():
        ray.init()
    if isinstance(dataprep_args, (str, bytes)):
        raise TypeError("ferry.ray.prepare: dataprep_args is a list of flags, not one string")
    patterns = [] if inputs is None and options.get("recipe") else _input_patterns(inputs)
    out = _local(out)
    if "workers" not in options:
        options["workers"] = max(1, math.ceil(num_cpus_per_part))
    flags = _flags(options) + list(dataprep_args)
    common = [a for p in patterns for a in ("--input", p)] + flags + ["--out", out]
    loc = []
    if parts_dir is not None:
        loc = ["--parts", _local(parts_dir)]
    if not progress:
        common.append("--quiet")
    n = int(parts) if parts is not None else _default_parts(num_cpus_per_part)
    if n < 1:
        raise ValueError(f"ferry.ray.prepare: parts={n}: want >= 1")
    # max_retries=0: prepare retries the parts itself (it counts the attempts
    # and does not retry a usage error); ray_options may override any of these.
    base = {"num_cpus": num_cpus_per_part, "max_retries": 0, **(ray_options or {})}
    part_task = _remote_run.options(**{"scheduling_strategy": "SPREAD", **base})

    def say(msg):
        if progress:
            print(f"ferry.ray: {msg}", file=sys.stderr, flush=True)

    def submit(i, attempt):
        label = f"part {i}/{n}"
        args = ["--part", f"{i}/{n}", *common, *loc, "--json"]
        return part_task.remote(binary, args, label, progress), (i, attempt)

    t0 = time.monotonic()
    shown = ", ".join(patterns) if len(patterns) <= 3 else f"{patterns[0]} ... ({len(patterns)} inputs)"
    if not patterns:
        shown = f"the recipe {options['recipe']}"
    say(f"{n} parts of {shown} -> {out} over {sum(1 for x in ray.nodes() if x.get('Alive'))} nodes")
    pending = dict(submit(i, 1) for i in range(n))
    runs = [None] * n
    failures = [[] for _ in range(n)]
    totals = collections.Counter()
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i, attempt = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except (PartError, ray.exceptions.RayError) as e:
                    cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else e
                    retriable = getattr(cause, "retriable", True)
                    first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
                    if attempt > max_retries or not retriable:
                        why = "a usage error" if not retriable else f"{attempt} attempts"
                        say(f"part {i}/{n} failed ({why}): {first}")
                        if isinstance(cause, PartError):
                            raise PartError(f"ferry.ray: part {i}/{n} failed after {why}: {cause}",
                                            cause.returncode, cause.stderr_tail, cause.node_id) from e
                        raise
                    failures[i].append({"attempt": attempt, "error": first, "node_id": getattr(cause, "node_id", None)})
                    say(f"part {i}/{n} attempt {attempt} failed: {first}; retrying ({attempt}/{max_retries})")
                    ref2, key = submit(i, attempt + 1)
                    pending[ref2] = key
                    continue
                s = res["summary"]
                res.update(part=i, attempts=attempt, failures=failures[i])
                runs[i] = res
                totals["parts"] += 1
                for k in ("records", "tokens", "input_bytes"):
                    totals[k] += int(s.get(k, 0) or 0)
                say(f"part {i}/{n} done on {res['host']} node {res['node_id'][:8]} (attempt {attempt}, "
                    f"{res['seconds']:.1f} s): {_fmt_count(s.get('records', 0))} records, "
                    f"{_fmt_count(s.get('tokens', 0))} tokens | {totals['parts']}/{n} parts, "
                    f"{_fmt_count(totals['records'])} records, {_fmt_count(totals['tokens'])} tokens, "
                    f"{totals['input_bytes'] / 1e6:.1f} MB in {time.monotonic() - t0:.1f} s")
    finally:
        for ref in pending:  # a part failed for good: stop the others (their dataprep dies with the worker)
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already finished or gone: nothing to stop
                pass
        for ref in pending:  # collect them, so that Ray does not report their errors as unhandled
            try:
                ray.get(ref, timeout=30)
            except Exception:
                pass

    commit_args = ["commit", out, *loc, "--workers", str(options["workers"]), "--json"]
    if options.get("force"):
        commit_args.append("--force")
    if not progress:
        commit_args.append("--quiet")
    say(f"commit {out}")
    t1 = time.monotonic()
    commit_task = _remote_run.options(**{**base, "max_retries": max_retries})  # Ray reruns it if its worker dies
    try:
        res = ray.get(commit_task.remote(binary, commit_args, f"commit {out}", progress))
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, PartError):
            say(f"commit failed: {str(e.cause).splitlines()[0]}")
            raise PartError(f"ferry.ray: {e.cause}", e.cause.returncode, e.cause.stderr_tail, e.cause.node_id) from e
        raise
    summary = dict(res["summary"])
    say(f"committed {out} on {res['host']} in {time.monotonic() - t1:.1f} s; {n} parts + commit in "
        f"{time.monotonic() - t0:.1f} s")
    summary["part_runs"] = runs
    return summary
