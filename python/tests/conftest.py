import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import ShardMaker, build_go_tool  # noqa: E402


@pytest.fixture(scope="session")
def make_shards(tmp_path_factory):
    """make_shards(ranks, rows, seq_len=16, mode="pad", extra=()) -> directory.

    Uses $FERRY_MKSHARDS when set (a prebuilt generator), else builds
    ./shard/internal/mkshards once per session."""
    root = tmp_path_factory.mktemp("ferry-shards")
    exe = os.environ.get("FERRY_MKSHARDS") or build_go_tool("shard/internal/mkshards", str(root))
    return ShardMaker(exe, str(root))
