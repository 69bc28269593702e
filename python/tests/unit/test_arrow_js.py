"""Differential test against a second Arrow implementation: every column the
manifest-offset reader maps (no pyarrow) equals what Apache Arrow's
JavaScript reader decodes from the same shard file. Needs node and the npm
package apache-arrow (in $FERRY_NODE_MODULES); under FERRY_REQUIRE_TOOLS=1 a
missing tool fails the test."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import ferry

from helpers import TESTS

JS = os.path.join(TESTS, "js", "read_shard.cjs")


def node_or_skip():
    mods = os.environ.get("FERRY_NODE_MODULES") or os.path.expanduser("~/.cache/ferry/npm/node_modules")
    node = shutil.which("node")
    missing = []
    if node is None:
        missing.append("node")
    if not os.path.exists(os.path.join(mods, "apache-arrow", "package.json")):
        missing.append(f"npm apache-arrow in {mods}")
    if missing:
        msg = f"missing {', '.join(missing)} (scripts/setup-test-deps installs them)"
        if os.environ.get("FERRY_REQUIRE_TOOLS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return node


@pytest.mark.parametrize("mode,extra", [("pad", ()), ("pack", ()), ("pad", ("-batch-rows", "7")),
                                        ("pack", ("-batch-rows", "2"))])
def test_views_match_apache_arrow_js(make_shards, mode, extra):
    node = node_or_skip()
    d = make_shards(ranks=2, rows=60, seq_len=16, mode=mode, extra=extra)
    sset = ferry.ShardSet(d)
    m = sset.manifest
    for r in range(m.ranks):
        sf = sset.shard(r)
        res = subprocess.run([node, JS, sf.path], capture_output=True, text=True, check=True)
        js = json.loads(res.stdout)
        assert js["rows"] == m.rows_per_rank
        assert js["batches"] == [b["rows"] for b in m.files[r]["batches"]]
        assert js["metadata"]["ferry.format"] == "ferry-shards"
        assert js["metadata"]["ferry.rank"] == str(r) and js["metadata"]["ferry.mode"] == mode
        cols, _ = sf.span(0, m.rows_per_rank)
        np.testing.assert_array_equal(cols["input_ids"], np.array(js["input_ids"], np.int32))
        np.testing.assert_array_equal(cols["labels"], np.array(js["labels"], np.int32))
        np.testing.assert_array_equal(cols["length"], np.array(js["length"], np.int32))
        if mode == "pack":
            np.testing.assert_array_equal(cols["position_ids"], np.array(js["position_ids"], np.int32))
        for row in range(m.rows_per_rank):
            assert [list(s) for s in sf.segments(row)] == js["segments"][row], f"rank {r} row {row}"
