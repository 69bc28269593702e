"""Test helpers: build shard directories with the Go tools, find tensors in
mappings. Tests read only files inside the repository; shards are made in a
temporary directory by the repository's own Go code."""

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def go_binary():
    for cand in (shutil.which("go"), "/usr/local/go/bin/go"):
        if cand and os.path.exists(cand):
            return cand
    raise RuntimeError("go not found on PATH or at /usr/local/go/bin/go: it builds the shard generator the tests use")


def build_go_tool(pkg, outdir):
    """go build ./pkg into outdir; returns the executable path. Fails loudly."""
    exe = os.path.join(outdir, os.path.basename(pkg))
    r = subprocess.run([go_binary(), "build", "-o", exe, "./" + pkg], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"go build ./{pkg} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    return exe


# python/tests: the tests (unit/, e2e/) and what they share (workers, seeds, js)
TESTS = os.path.join(REPO, "python", "tests")
ARROWCHECK = os.path.join(REPO, "internal", "testutil", "arrowcheck", "check_shards.py")
_arrowcheck = []


def arrowcheck():
    """The shard checker the Go tests use too (internal/testutil/arrowcheck/
    check_shards.py: pyarrow's memory-mapped IPC file reader against the
    manifest, a plain-file read at the manifest's offsets and the format's
    rules), loaded as a module; None without pyarrow, which is an error under
    FERRY_REQUIRE_TOOLS=1."""
    if not _arrowcheck:
        spec = importlib.util.spec_from_file_location("ferry_arrowcheck", ARROWCHECK)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except ImportError as e:
            if os.environ.get("FERRY_REQUIRE_TOOLS") == "1":
                raise RuntimeError(f"{ARROWCHECK} needs pyarrow and numpy in this interpreter: {e}") from e
            mod = None
        _arrowcheck.append(mod)
    return _arrowcheck[0]


class ShardMaker:
    """Runs the synthetic shard generator (shard/internal/mkshards), then
    has pyarrow check every directory it made (:func:`arrowcheck`)."""

    def __init__(self, exe, root):
        self.exe = exe
        self.root = root
        self.n = 0

    def __call__(self, ranks, rows, seq_len=16, mode="pad", extra=()):
        self.n += 1
        out = os.path.join(self.root, f"shards-{self.n}")
        cmd = [self.exe, "-out", out, "-ranks", str(ranks), "-rows", str(rows), "-seq-len", str(seq_len),
               "-mode", mode, *extra]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
        check = arrowcheck()
        if check is not None:
            rep = check.check_dirs([out])
            if not rep.ok:
                raise AssertionError(f"pyarrow disagrees with ferry on {out} ({' '.join(cmd)}):\n{rep.text()}")
        return out


def locate(loader, t):
    """(shard rank, byte offset in the shard file) of tensor t's first byte,
    or None when t does not point into a mapped shard."""
    p = t.data_ptr()
    for f in loader.shards._files:
        if f is not None and f.address <= p < f.address + f.size:
            return f.rank, p - f.address
    return None


def read_rows(directory, manifest, rank, column, row, rows):
    """Rows of a column read with plain file I/O (no mapping): the
    independent reference the zero-copy views are compared with."""
    f = manifest.files[rank]
    out = []
    with open(os.path.join(directory, f["path"]), "rb") as fh:
        for b in f["batches"]:
            lo, hi = max(row, b["row_start"]), min(row + rows, b["row_start"] + b["rows"])
            if lo >= hi:
                continue
            L = manifest.seq_len
            width = L if column != "length" else 1
            fh.seek(b["buffers"][column]["offset"] + (lo - b["row_start"]) * width * 4)
            out.append(np.frombuffer(fh.read((hi - lo) * width * 4), np.int32).reshape(hi - lo, width))
    a = np.concatenate(out)
    return a[:, 0] if column == "length" else a


class Daemon:
    """A ferry-serve process, started and listening (log in SOCK.log)."""

    def __init__(self, exe, data, sock, args=(), env=None):
        self.sock = sock
        self.log = open(sock + ".log", "w+")
        data_args = [] if data is None else ["--data", data]  # None: model files only
        self.proc = subprocess.Popen([exe, *data_args, "--socket", sock, *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ferry-serve exited {self.proc.returncode}:\n{self.output()}")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(sock)
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"ferry-serve did not listen on {sock} within 30 s:\n{self.output()}")
                time.sleep(0.02)
            finally:
                s.close()

    @property
    def pid(self):
        return self.proc.pid

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


def need(what, ok):
    """Fail (under FERRY_REQUIRE_TOOLS=1, as in `make test`) or skip when a
    tool or module a test needs is missing."""
    import pytest

    if ok:
        return
    if os.environ.get("FERRY_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{what} (FERRY_REQUIRE_TOOLS=1; scripts/setup-test-deps installs it)")
    pytest.skip(what)


def import_or_need(name):
    """The module called name, or need() says it is missing."""
    try:
        return __import__(name)
    except ImportError as e:
        need(f"this Python cannot import {name}: {e}", False)


def read_maybe_zstd(path):
    """The bytes of path, decompressed when it ends in .zst (zstd CLI, or the
    zstandard module when present)."""
    if not path.endswith(".zst"):
        with open(path, "rb") as f:
            return f.read()
    exe = shutil.which("zstd")
    if exe:
        return subprocess.run([exe, "-dcq", path], check=True, capture_output=True).stdout
    try:
        import zstandard
    except ImportError:
        need(f"cannot decompress {path}: no zstd on PATH and no zstandard module", False)
    with open(path, "rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read()


class RayTempDir:
    """A temporary directory that holds everything a Ray cluster of the
    tests writes: the nodes' session directories (``ROOT/ray``, passed as
    the nodes' temp dir) and the address file Ray writes to its *default*
    temp dir whatever the nodes were given (``RAY_TMPDIR/ray``, which is
    ``/tmp/ray`` unless RAY_TMPDIR or TMPDIR say otherwise). RAY_TMPDIR
    points at ROOT while it is open, so both are the same directory and
    nothing goes to /tmp/ray. ROOT is under the system temp dir with a short
    name: Ray's socket paths live under it (at most 107 bytes)."""

    def __enter__(self):
        import tempfile

        self.root = tempfile.mkdtemp(prefix="ray-")
        self.temp_dir = os.path.join(self.root, "ray")
        os.mkdir(self.temp_dir)
        self._saved = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = self.root
        return self

    def env(self, base=None):
        """base (default os.environ) with RAY_TMPDIR set, for `ray start` and friends."""
        return dict(os.environ if base is None else base, RAY_TMPDIR=self.root)

    def __exit__(self, *exc):
        if self._saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = self._saved
        shutil.rmtree(self.root, ignore_errors=True)
        return False


def versitygw_binary():
    found = shutil.which("versitygw")
    if found:
        return found
    r = subprocess.run([go_binary(), "env", "GOPATH"], capture_output=True, text=True)
    cand = os.path.join(r.stdout.strip(), "bin", "versitygw")
    return cand if os.path.exists(cand) else None


@contextlib.contextmanager
def versitygw(root):
    """A real S3 server (versitygw, POSIX back end, as the Go tests use) on a
    free port of 127.0.0.1, serving each directory under ROOT as a bucket;
    yields the AWS_* environment that reaches it. Fails the test when
    versitygw is missing or does not answer within 30 s."""
    import pytest

    exe = versitygw_binary()
    need("versitygw (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0; scripts/setup-test-deps)", exe)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "ferrytest",
           "AWS_SECRET_ACCESS_KEY": "ferrytestsecret0123456789", "AWS_REGION": "us-east-1"}
    log = open(os.path.join(root, "versitygw.log"), "w+")
    proc = subprocess.Popen([exe, "--access", env["AWS_ACCESS_KEY_ID"], "--secret", env["AWS_SECRET_ACCESS_KEY"],
                             "--region", env["AWS_REGION"], "--port", f"127.0.0.1:{port}", "--quiet", "posix",
                             str(root)], stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, ROOT_ACCESS_KEY_ID="", ROOT_SECRET_ACCESS_KEY=""))
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"versitygw exited {proc.returncode} at start:\n{log.read()}")
            try:
                urllib.request.urlopen(env["AWS_ENDPOINT_URL"] + "/", timeout=1)
                break
            except urllib.error.HTTPError:  # it answers (403 without a signature): up
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("versitygw did not answer within 30 s")
                time.sleep(0.05)
        yield env
    finally:
        proc.kill()
        proc.wait()
        log.close()


def model_dir(root, family):
    """A tokenizer directory under root as a model download has it:
    tokenizer.json, tokenizer_config.json (special tokens, maybe the chat
    template) and chat_template.jinja where the family keeps it there (from
    testdata/tokenizers and testdata/chattemplate/families)."""
    d = root / family
    d.mkdir()
    src = os.path.join(REPO, "testdata", "tokenizers", family, "tokenizer.json.zst")
    (d / "tokenizer.json").write_bytes(read_maybe_zstd(src))
    fam = os.path.join(REPO, "testdata", "chattemplate", "families", family)
    for name in os.listdir(fam):
        with open(os.path.join(fam, name), "rb") as f:
            (d / name).write_bytes(f.read())
    return d

