"""bench/gpu/run.sh, the one-call GPU proof of ferry (issue 29), run on CPU
with --cpu-smoke: the same script and code paths (dataprep and ferry-serve
from the prepared static binaries; packed-document isolation on sdpa's
forced backends and flex_attention, with a leak control; the seed's data
path, ferry pad and ferry pack training a model of Qwen2.5's vocabulary;
the seed's first-step loss against ferry pad --labels copy on the same rows;
a DCP checkpoint, ckptmerge, from_pretrained, logits), at toy sizes, with
every device part marked as stubbed. So the script a GPU machine runs is
known to work before one is lent; the GPU figures come from running it
there (bench/gpu/README.md)."""

import json
import os
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.e2e

# Every check the smoke run must report as passed ...
PASS = [
    ("prep", "dataprep"),
    ("prep", "ferry-serve batches equal the direct Loader's"),
    *[("packing", f"isolation {arch} {impl}")
      for arch in ("qwen2", "llama")
      for impl in ("sdpa flash", "sdpa mem-efficient", "sdpa cudnn", "flex_attention compiled")],
    ("packing", "leak control qwen2: documents that see each other exceed the tolerance"),
    ("packing", "leak control llama: documents that see each other exceed the tolerance"),
    ("train", "train seed: 3 steps, finite loss"),
    ("train", "train ferry pad: 3 steps, finite loss"),
    ("train", "train ferry pack: 3 steps, finite loss"),
    ("train", "ferry pad --labels copy: the seed's first-step loss on the same rows"),
    ("train", "DCP checkpoint written from the trained model"),
    ("checkpoint", "ckptmerge"),
    ("checkpoint", "from_pretrained(merged): parameters identical to the DCP checkpoint's"),
    ("checkpoint", "ckptmerge + from_pretrained: logits equal the trained model's"),
    ("load_pretrained", "ferry.load_pretrained: bit-identical to from_pretrained"),
]
# ... and the ones that are "not available" on CPU.
NOT_AVAILABLE = [
    ("packing", "isolation flash_attention_2"),
    ("packing", "isolation flash_attention_3"),
]


def test_gpu_run_cpu_smoke(tmp_path):
    prepared = tmp_path / "prepared"
    r = subprocess.run(["bench/gpu/prepare.sh", "--out", str(prepared), "--records", "200"], cwd=REPO,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out, work = tmp_path / "results", tmp_path / "work"
    env = dict(os.environ, OMP_NUM_THREADS="2")
    r = subprocess.run(["bench/gpu/run.sh", "--cpu-smoke", "--prepared", str(prepared), "--out", str(out),
                        "--work", str(work), "--python", sys.executable], cwd=REPO, capture_output=True, text=True,
                       timeout=1200, env=env)
    log = r.stdout[-6000:] + r.stderr[-3000:]
    assert (out / "results.json").exists(), log
    res = json.loads((out / "results.json").read_text())
    parts = res["parts"]
    got = {(p, c["name"]): c for p, sec in parts.items() for c in sec.get("checks", [])}

    # Every check is there with the verdict it must have, and no other.
    for key in PASS:
        assert key in got, f"check {key} missing from results.json\n{log}"
        assert got[key]["pass"] is True, f"{key}: {got[key]}\n{log}"
    for key in NOT_AVAILABLE:
        assert key in got and got[key]["pass"] is None, f"{key}: {got.get(key)}"
    assert sorted(got) == sorted(PASS + NOT_AVAILABLE), sorted(set(got) ^ set(PASS + NOT_AVAILABLE))
    assert r.returncode == 0, log
    run = res["run"]
    assert run["ok"] and not run["failed"] and not run["unfinished"], run
    assert run["mode"].startswith("cpu-smoke") and run["versions"]["torch"] and run["versions"]["dataprep"]

    # Every device part says what stood in for the GPU.
    for p in ("prep", "packing", "train", "checkpoint"):
        assert parts[p]["status"] == "done", (p, parts[p].get("status"), parts[p].get("error"))
        assert parts[p]["device"] == "cpu (smoke)" and parts[p]["stub"], p
    assert parts["load_pretrained"]["status"] == "done" and parts["load_pretrained"]["load_pretrained_s"] > 0

    # The numbers the GPU run reports exist for every data path.
    train = parts["train"]
    assert set(train["paths"]) == {"seed", "ferry pad", "ferry pack"}
    for name, p in train["paths"].items():
        assert len(p["steps"]) == 3 and p["first_step_s"] > 0 and p["steady_step_s_median"] > 0, name
        assert p["real_tokens_per_s"] > 0 and 0 <= p["data_share"] < 1 and p["peak_gpu_memory_gib"] is None, name
    assert train["paths"]["ferry pack"]["padding_share"] < train["paths"]["seed"]["padding_share"]
    fl = train["first_loss"]
    assert all(fl["tensors_identical"].values()) and fl["rel_diff"] <= fl["tolerance_rel"]
    iso = [x for x in parts["packing"]["results"] if x["outcome"] == "equal"]
    assert len(iso) == 8 and all(x["rows_with_several"] >= 1 and x["documents"] > x["rows_with_several"] for x in iso)
    assert parts["checkpoint"]["logits"]["identical"]

    # The human summary, and no scratch left behind.
    assert "PASS" in (out / "summary.md").read_text().splitlines()[0]
    assert (out / "run.log").exists()
    assert list(work.iterdir()) == [], list(work.iterdir())
