"""ckptmerge on real torch 2.x checkpoints made here, with the pinned torch,
on CPU (gloo), by torchrun: FSDP1 SHARDED_STATE_DICT (the seeds' wrapping),
FSDP2 fully_shard, get_state_dict with the optimizer (ferry.dcp's layout and
the PyTorch recipe's {"app": AppState}) and torch's HuggingFaceStorageWriter.

Every merge is compared byte for byte with torch's own consolidation
(dcp_to_torch_save, then safetensors.torch.save_file with {"format": "pt"},
the convention of testdata/dcp; for the HF writer's shards,
consolidate_safetensors_files), and the merged model is loaded by
transformers.AutoModelForCausalLM.from_pretrained, with no missing or
unexpected keys, and gives the saved model's logits exactly.

One torchrun launch on 3 ranks (tiny Llama under FSDP1, tiny Qwen2 under
FSDP2, one AdamW step each) writes every checkpoint, once per session."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from helpers import TESTS, build_go_tool

WORKERS = os.path.join(TESTS, "dcp_workers")
sys.path.insert(0, WORKERS)
import tiny_models  # noqa: E402

sys.path.remove(WORKERS)

RANKS = 3  # uneven FSDP splits of every dimension (tiny_models)
# job (a directory written by save_checkpoints.py) -> architecture
JOBS = {"llama-fsdp1": "llama", "qwen2-fsdp2": "qwen2"}
# checkpoint -> the path of the model's state dict inside torch's consolidation
DCP_CASES = {
    "llama-fsdp1/fsdp1": (),
    "llama-fsdp1/train-state": ("model",),
    "llama-fsdp1/app-state": ("app", "model"),
    "qwen2-fsdp2/fsdp2": (),
    "qwen2-fsdp2/train-state": ("model",),
    "qwen2-fsdp2/app-state": ("app", "model"),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if r.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n"
                    f"--- stderr\n{r.stderr[-6000:]}")
    return r


@pytest.fixture(scope="session")
def ckptmerge_bin(tmp_path_factory):
    """cmd/ckptmerge, built once per session ($FERRY_CKPTMERGE_BIN: a prebuilt one)."""
    exe = os.environ.get("FERRY_CKPTMERGE_BIN")
    if exe:
        return exe
    try:
        return build_go_tool("cmd/ckptmerge", str(tmp_path_factory.mktemp("bin")))
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """{job: directory} after one torchrun launch of save_checkpoints.py."""
    root = tmp_path_factory.mktemp("torch2-dcp")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}", "--master_addr=127.0.0.1",
         f"--master_port={free_port()}", os.path.join(WORKERS, "save_checkpoints.py"), "--out", str(root),
         "--jobs", ",".join(JOBS)], env=env, cwd=str(root))
    assert (root / "done").exists()
    return {job: root / job for job in JOBS}


def merge(ckptmerge, ckpt, out, *flags):
    """ckptmerge --json; returns the summary."""
    r = run([ckptmerge, "--json", *flags, str(ckpt), str(out)])
    return json.loads(r.stdout)


def reference(saved, job, kind=None):
    """The trained weights as the job held them (unsharded, rank 0); for the
    HF writer's checkpoint (kind "hf") without the tied lm_head.weight."""
    ref = torch.load(saved[job] / "reference.pt", weights_only=True)
    if kind == "hf" and tiny_models.CONFIGS[JOBS[job]]["tie_word_embeddings"]:
        del ref["lm_head.weight"]
    return ref


def torch_consolidation(ckpt, tmp_path, path):
    """Ground truth: torch's dcp_to_torch_save, the model's part written by
    safetensors' save_file (the convention of testdata/dcp/README.md)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(ckpt), str(tmp_path / "torch.pt"))
    sd = torch.load(tmp_path / "torch.pt", weights_only=False)
    for k in path:
        sd = sd[k]
    expected = tmp_path / "expected.safetensors"
    save_file(sd, str(expected), metadata={"format": "pt"})
    return sd, expected


@pytest.mark.parametrize("case", sorted(DCP_CASES))
def test_dcp_byte_identical_to_torch(saved, ckptmerge_bin, tmp_path, case):
    job, kind = case.split("/")
    sd, expected = torch_consolidation(saved[job] / kind, tmp_path, DCP_CASES[case])
    ref = reference(saved, job)
    assert sorted(sd) == sorted(ref)
    for k, v in ref.items():
        assert torch.equal(sd[k], v), f"torch's consolidation of {k} differs from the saved model"

    res = merge(ckptmerge_bin, saved[job] / kind, tmp_path / "hf")
    got = (tmp_path / "hf" / "model.safetensors").read_bytes()
    assert got == expected.read_bytes(), f"{case}: ckptmerge output differs from torch's consolidation"
    assert sorted(t["name"] for t in res["tensors"]) == sorted(ref)
    skipped = {s["reason"] for s in res.get("skipped") or []}
    if kind == "fsdp1" or kind == "fsdp2":
        assert not skipped, res.get("skipped")
        return
    # the optimizer (exp_avg, exp_avg_sq, step tensors; param_groups) stays
    # out, and with --include-optimizer its tensors are torch's too
    assert any("training state" in r for r in skipped), res.get("skipped")
    osd = torch.load(tmp_path / "torch.pt", weights_only=False)
    for k in DCP_CASES[case][:-1]:
        osd = osd[k]
    osd = osd["optim"]["state"]
    merge(ckptmerge_bin, saved[job] / kind, tmp_path / "hf-optim", "--include-optimizer")
    got = load_file(str(tmp_path / "hf-optim" / "model.safetensors"))
    want = {f"optim.state.{fqn}.{name}": t for fqn, st in osd.items() for name, t in st.items()}
    assert {k.rsplit(".", 1)[1] for k in want} == {"exp_avg", "exp_avg_sq", "step"}
    assert sorted(got) == sorted([*want, *ref])
    for k, v in want.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


def test_hf_storage_writer_byte_identical_to_torch(saved, ckptmerge_bin, tmp_path):
    from torch.distributed.checkpoint._consolidate_hf_safetensors import consolidate_safetensors_files

    shards = saved["qwen2-fsdp2"] / "hf"
    assert not (shards / ".metadata").exists()
    assert len([n for n in os.listdir(shards) if n.endswith(".safetensors")]) == RANKS
    ref = reference(saved, "qwen2-fsdp2", "hf")
    (tmp_path / "torch").mkdir()
    consolidate_safetensors_files(str(shards), str(tmp_path / "torch"), fqn_to_index_mapping=dict.fromkeys(ref, 1))
    torch_files = sorted(n for n in os.listdir(tmp_path / "torch") if n.endswith(".safetensors"))
    assert torch_files == ["model-00001-of-00001.safetensors"]
    sd = load_file(str(tmp_path / "torch" / torch_files[0]))
    assert sorted(sd) == sorted(ref)
    for k, v in ref.items():
        assert torch.equal(sd[k], v), f"torch's consolidation of {k} differs from the saved model"
    expected = tmp_path / "expected.safetensors"
    save_file(sd, str(expected), metadata={"format": "pt"})

    merge(ckptmerge_bin, shards, tmp_path / "hf")
    got = (tmp_path / "hf" / "model.safetensors").read_bytes()
    assert got == expected.read_bytes(), "ckptmerge output differs from torch's consolidation"


@pytest.mark.parametrize("job,kind", [("llama-fsdp1", "fsdp1"), ("llama-fsdp1", "app-state"),
                                      ("qwen2-fsdp2", "train-state"), ("qwen2-fsdp2", "hf")])
def test_transformers_loads_merged_model(saved, ckptmerge_bin, tmp_path, job, kind):
    import transformers

    arch = JOBS[job]
    out = tmp_path / "hf"
    res = merge(ckptmerge_bin, saved[job] / kind, out, "--config-from", str(saved[job] / "base"))
    assert "config.json" in (res.get("copied") or []), res.get("copied")
    ref = reference(saved, job, kind)

    # safetensors reads every tensor bit-identical to the saved model's
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert sorted(f.keys()) == sorted(ref)
        for k in f.keys():
            t = f.get_tensor(k)
            assert t.dtype == ref[k].dtype and torch.equal(t, ref[k]), k

    model, info = transformers.AutoModelForCausalLM.from_pretrained(str(out), output_loading_info=True,
                                                                    attn_implementation="eager")
    assert type(model).__name__ == {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[arch]
    for what in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        assert not info.get(what), f"{what}: {info[what]}"
    model.eval()

    ref = reference(saved, job)
    saved_model = transformers.AutoModelForCausalLM.from_config(tiny_models.config(arch), dtype=torch.float32)
    saved_model.load_state_dict(ref, strict=True)
    saved_model.eval()
    assert sorted(model.state_dict()) == sorted(ref)
    for k, v in model.state_dict().items():
        assert v.dtype == torch.float32 and torch.equal(v, ref[k]), k
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = tiny_models.batch(tiny_models.CONFIGS[arch]["vocab_size"], seed=99)
    with torch.no_grad():
        got, want = model(input_ids=ids).logits, saved_model(input_ids=ids).logits
    assert got.dtype == torch.float32 and torch.equal(got, want)


def test_transformers_reports_saved_names(saved, ckptmerge_bin, tmp_path):
    """The control for the key checks above: the recipe's checkpoint merged
    with --keep-keys (names as saved, "app.model.model...", what ckptmerge
    wrote before it learned that layout) is not a model transformers loads."""
    import transformers

    out = tmp_path / "hf"
    merge(ckptmerge_bin, saved["llama-fsdp1"] / "app-state", out, "--keep-keys", "--config-from",
          str(saved["llama-fsdp1"] / "base"))
    _, info = transformers.AutoModelForCausalLM.from_pretrained(str(out), output_loading_info=True)
    assert "lm_head.weight" in info["missing_keys"]
    assert "app.model.lm_head.weight" in info["unexpected_keys"]
