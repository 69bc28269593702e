import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import REPO, ShardMaker, build_go_tool, go_binary  # noqa: E402


@pytest.fixture(scope="session")
def make_shards(tmp_path_factory):
    """make_shards(ranks, rows, seq_len=16, mode="pad", extra=()) -> directory.

    Uses $FERRY_MKSHARDS when set (a prebuilt generator), else builds
    ./shard/internal/mkshards once per session."""
    root = tmp_path_factory.mktemp("ferry-shards")
    exe = os.environ.get("FERRY_MKSHARDS") or build_go_tool("shard/internal/mkshards", str(root))
    return ShardMaker(exe, str(root))


@pytest.fixture(scope="session")
def serve_bin():
    """bin/ferry-serve, built once per session ($FERRY_SERVE_BIN: a prebuilt one)."""
    exe = os.environ.get("FERRY_SERVE_BIN")
    if exe:
        return exe
    r = subprocess.run([go_binary(), "build", "-o", "bin/", "./cmd/ferry-serve"], cwd=REPO, capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot build bin/ferry-serve (go build -o bin/ ./cmd/ferry-serve, exit {r.returncode}):\n"
                    f"{r.stdout}{r.stderr}")
    return os.path.join(REPO, "bin", "ferry-serve")
