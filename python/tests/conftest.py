import importlib.metadata
import os
import platform
import subprocess

import pytest

import ferry
from helpers import REPO, ShardMaker, build_go_tool, go_binary

# The versions this run tested against, printed at the top of the log.
VERSIONED = ["torch", "transformers", "ray", "datasets", "pyarrow", "safetensors", "tokenizers", "accelerate", "mlflow",
             "numpy"]


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def pytest_report_header(config):
    return [
        f"ferry {ferry.__version__} from {os.path.dirname(ferry.__file__)}",
        f"Python {platform.python_version()}: " + ", ".join(f"{n} {_version(n)}" for n in VERSIONED),
    ]


def pytest_configure(config):
    # A lane that asks for a transformers release line (make test's 4.x lane)
    # must really run it.
    want = os.environ.get("FERRY_EXPECT_TRANSFORMERS")
    if want and not _version("transformers").startswith(want):
        raise pytest.UsageError(f"FERRY_EXPECT_TRANSFORMERS={want} but transformers {_version('transformers')} is "
                                f"imported (PYTHONPATH={os.environ.get('PYTHONPATH', '')!r})")
    # `make test` runs the tests against the package pip installed from
    # ./python, as users get it, not against the source tree.
    src = os.path.join(REPO, "python", "ferry")
    if os.environ.get("FERRY_REQUIRE_TOOLS") == "1" and os.path.realpath(os.path.dirname(ferry.__file__)) == src:
        raise pytest.UsageError(f"ferry is imported from the source tree ({src}), not from an installed package: "
                                "run `pip install ./python` (make install-python) first")


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
