"""bench/gpu/fsdp_bench.py, the GPU job of the seeds' shape (issue 16), run
on CPU with --smoke: the same code paths (seed data path, ferry pad and pack
under FSDP1 with the real transformers, check_packing, the isolation check,
sharded DCP save -> ckptmerge -> from_pretrained) on a tiny model, so the
script a GPU machine runs is known to work before one is lent. The GPU
figures themselves come from running it there (bench/README.md)."""

import json
import os
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.e2e


def test_fsdp_bench_smoke(tmp_path):
    prepared = tmp_path / "prepared"
    r = subprocess.run(["bench/gpu/prepare.sh", "", str(prepared), "48"], cwd=REPO, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = tmp_path / "smoke.json"
    env = dict(os.environ, OMP_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "bench/gpu/fsdp_bench.py", "--smoke", "--prepared", str(prepared),
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["errors"] == []
    phases = {p["phase"].split(":")[0]: p for p in res["phases"]}
    assert set(phases) == {"seed", "ferry pad", "ferry pack"}, list(phases)
    assert all(p["tokens_per_s"] > 0 and p["final_loss"] > 0 for p in phases.values())
    assert "isolated" in phases["ferry pack"]["packing"]
    assert phases["ferry pack"]["padding_share"] < phases["ferry pad"]["padding_share"]
    iso = {r["attn"]: r for r in res["isolation"]}
    assert set(iso) >= {"sdpa", "eager"}
    for row in iso.values():
        assert row["rows_with_several"] >= 1 and row["documents"] > row["rows_with_several"]
        assert row["max_abs_diff"] <= 1e-4, row
    c = res["checkpoint"]
    assert c["params_identical"] and c["logits_identical"]
