"""The examples (examples/torchrun-fsdp, examples/ray-train) against the
defects a seed user would hit (issue 16): each test imports the example
module and calls its functions, parses its YAML, or runs a short job.

Never skips: missing Go tools or libraries are failures."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types

import pytest
import torch
import yaml

from helpers import REPO, build_go_tool

EXAMPLES = os.path.join(REPO, "examples")
TORCHRUN_DIR = os.path.join(EXAMPLES, "torchrun-fsdp")
RAY_DIR = os.path.join(EXAMPLES, "ray-train")
ALPACA = os.path.join(REPO, "testdata", "alpaca", "alpaca_tiny.json")
TOKDIR = os.path.join(REPO, "testdata", "tokenizers")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def load_example(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fsdp_ex():
    return load_example(os.path.join(TORCHRUN_DIR, "train.py"), "ferry_example_torchrun")


@pytest.fixture(scope="module")
def ray_ex():
    return load_example(os.path.join(RAY_DIR, "train_ray.py"), "ferry_example_ray")


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    d = tmp_path_factory.mktemp("bin")
    try:
        return types.SimpleNamespace(dataprep=build_go_tool("cmd/dataprep", str(d)),
                                     ckptmerge=build_go_tool("cmd/ckptmerge", str(d)))
    except RuntimeError as e:
        pytest.fail(f"the example tests need the Go tools: {e}")


def tokenizer_dir(root, name):
    """testdata/tokenizers/NAME with tokenizer.json decompressed (as the YAMLs download it)."""
    d = os.path.join(root, f"tok-{name}")
    if not os.path.exists(d):
        os.makedirs(d)
        src = os.path.join(TOKDIR, name)
        with open(os.path.join(d, "tokenizer.json"), "wb") as f:
            subprocess.run(["zstd", "-dc", os.path.join(src, "tokenizer.json.zst")], stdout=f, check=True)
        shutil.copy(os.path.join(src, "tokenizer_config.json"), d)
    return d


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tok"))
    return types.SimpleNamespace(qwen=tokenizer_dir(root, "qwen2.5"), llama=tokenizer_dir(root, "llama3.1"))


def ray_args(tools, toks, tmp_path, **kw):
    a = dict(dataprep=tools.dataprep, input=ALPACA, tokenizer=toks.qwen, seq_len=64, labels="mask-pad",
             mode="pad", data_dir=str(tmp_path / "data"), rebuild_data=False)
    a.update(kw)
    return types.SimpleNamespace(**a)


# --- defect 1: FSDP-correct gradient clipping in ray-train -------------------

CLIP_WORKER = textwrap.dedent("""
    import importlib.util, json, os, sys
    import torch, torch.distributed as dist
    spec = importlib.util.spec_from_file_location("train_ray", sys.argv[1])
    ex = importlib.util.module_from_spec(spec); spec.loader.exec_module(ex)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))  # same batch on both ranks
    ref = make()
    ref(x).pow(2).sum().backward()
    want = torch.norm(torch.stack([p.grad.norm() for p in ref.parameters()])).item()

    m1 = FSDP(make(), use_orig_params=True, device_id=torch.device("cpu"))
    m1(x).pow(2).sum().backward()
    local = torch.norm(torch.stack([p.grad.norm() for p in m1.parameters() if p.grad is not None])).item()
    fsdp1 = float(ex.clip_grad_norm(m1, 1e9))

    m2 = make()
    fully_shard(m2, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    m2(x).pow(2).sum().backward()
    n2 = ex.clip_grad_norm(m2, 1e9)
    fsdp2 = float(n2.full_tensor() if hasattr(n2, "full_tensor") else n2)
    with open(os.path.join(sys.argv[2], f"rank{rank}.json"), "w") as f:
        json.dump({"want": want, "local": local, "fsdp1": fsdp1, "fsdp2": fsdp2}, f)
    dist.destroy_process_group()
""")


def test_ray_clip_uses_global_norm_under_fsdp(ray_ex, tmp_path):
    import inspect

    assert "clip_grad_norm(model, 1.0)" in inspect.getsource(ray_ex.train_func)
    script = tmp_path / "clip_worker.py"
    script.write_text(CLIP_WORKER)
    r = subprocess.run(TORCHRUN + ["--standalone", "--nproc_per_node=2", str(script),
                                   os.path.join(RAY_DIR, "train_ray.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2)]
    for x in res:
        assert x["fsdp1"] == pytest.approx(x["want"], rel=1e-5), x
        assert x["fsdp2"] == pytest.approx(x["want"], rel=1e-5), x
    # what the old call saw: each rank its own shard's norm, smaller than the global one
    assert all(x["local"] < x["want"] * (1 - 1e-3) for x in res), res


# --- defect 7: --tiny / --cpu never switch themselves on ---------------------

def test_torchrun_no_cuda_without_tiny_is_an_error(fsdp_ex, monkeypatch, capsys):
    monkeypatch.delenv("HYPERPARAMETERS_PATH", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        fsdp_ex.parse_args(["--data-dir", "/nonexistent"])
    assert e.value.code == 2 and "CUDA is not available" in capsys.readouterr().err
    assert fsdp_ex.parse_args(["--tiny"]).tiny
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not fsdp_ex.parse_args([]).tiny


def test_ray_no_gpu_without_cpu_is_an_error(ray_ex, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        ray_ex.parse_args(["--worker"])
    assert "CUDA is not available" in capsys.readouterr().err
    assert ray_ex.parse_args(["--worker", "--cpu"]).cpu
    with pytest.raises(SystemExit, match="no GPU"):
        ray_ex.gpu_workers(ray_ex.parse_args([]), {"CPU": 16})
    assert ray_ex.gpu_workers(ray_ex.parse_args([]), {"GPU": 8}) == 8
    assert ray_ex.gpu_workers(ray_ex.parse_args(["--cpu", "--num-workers", "2"]), {}) == 2


# --- defect 3: no huggingface-cli; the Ray YAML stops on failure -------------

def yaml_command(example):
    with open(os.path.join(EXAMPLES, example, "train.yaml")) as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize("example", ["torchrun-fsdp", "ray-train"])
def test_yaml_installs_ferry_from_the_wheel(example):
    """ferry and its commands come from the one wheel in dependencies (issue
    17), of the version in python/ferry/__init__.py, and the commands run
    from the PATH it installs them on, not from a bundled bin/."""
    import re

    with open(os.path.join(REPO, "python", "ferry", "__init__.py")) as f:
        version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    y = yaml_command(example)
    wheels = [d for d in y["environment"]["dependencies"] if "ferry" in d]
    assert wheels == [f"./ferry-{version}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], wheels
    assert "bin/" not in y["command"] and "bundle.sh" not in y["command"]
    code = "\n".join(line for line in y["command"].splitlines() if not line.lstrip().startswith("#"))
    for cmd in ("dataprep", "ckptmerge"):
        assert re.search(rf"(^|\s){cmd}\s+(--|\$)", code, re.M), f"{cmd} is not run from the PATH"


@pytest.mark.parametrize("example", ["torchrun-fsdp", "ray-train"])
def test_yaml_downloads_without_huggingface_cli(example):
    cmd = yaml_command(example)["command"]
    code = "\n".join(line for line in cmd.splitlines() if not line.lstrip().startswith("#"))
    assert "huggingface-cli" not in code and "snapshot_download" in code
    assert "head -n1" not in cmd and "train-*.parquet" in cmd  # the train split, not the first file
    assert "set -euo pipefail" in cmd.split("snapshot_download")[0]
    r = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_ray_yaml_stops_when_the_download_fails(tmp_path):
    """Stub `ray` (succeeds) and `python` (the download fails; train_ray.py
    records that it ran): the job must stop before training."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    ran = tmp_path / "train-ran"
    (stubs / "ray").write_text("#!/bin/sh\nexit 0\n")
    (stubs / "python").write_text(f"#!/bin/sh\ncase \"$*\" in *train_ray.py*) touch {ran}; exit 0;; esac\n"
                                  "echo download failed >&2; exit 1\n")
    for s in stubs.iterdir():
        s.chmod(0o755)
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", CODE_SOURCE_PATH=str(tmp_path), NODE_RANK="0")
    r = subprocess.run(["bash", "-c", yaml_command("ray-train")["command"]], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and not ran.exists(), r.stdout + r.stderr


# --- defect 2: --labels explicit, logged, seed parity in one switch ----------

def test_yamls_pass_labels_explicitly():
    t = yaml_command("torchrun-fsdp")
    assert t["parameters"]["format"] == "alpaca" and '--labels "$LABELS"' in t["command"]
    assert '--format "$FORMAT"' in t["command"]
    assert torchrun_yaml_env(dict(t["parameters"]))["LABELS"] == "mask-pad"
    assert torchrun_yaml_env(dict(t["parameters"], labels="copy"))["LABELS"] == "copy"  # seed parity: one line
    assert '--format "$FORMAT" --labels "$LABELS"' in yaml_command("ray-train")["command"]


def torchrun_yaml_env(params, tmp=None):
    """The variables torchrun-fsdp/train.yaml's command exports from its
    parameters (it runs this Python snippet), for params."""
    import re

    cmd = yaml_command("torchrun-fsdp")["command"]
    snippet = re.search(r"eval \"\$\(python -c '(.*?)'\)\"", cmd, re.S).group(1)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "params.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(params, f)
        r = subprocess.run([sys.executable, "-c", snippet], env=dict(os.environ, HYPERPARAMETERS_PATH=path),
                           capture_output=True, text=True, check=True)
    import shlex

    return dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in r.stdout.splitlines())


# --- issue 27: chat data, one switch in each YAML ------------------------------

CHAT = os.path.join(REPO, "testdata", "chat", "fastchat-dummy", "dummy_conversation.json.zst")  # 500 ShareGPT records


def test_yamls_switch_to_chat_in_one_line(tmp_path):
    """torchrun-fsdp: `format: chat` alone makes the command download a chat
    data set and run dataprep --format chat --labels assistant. ray-train:
    FORMAT=chat alone does the same for train_ray.py (run with stubs: the
    download stub records what it was asked for and fails, which stops the
    job)."""
    t = yaml_command("torchrun-fsdp")
    env = torchrun_yaml_env(dict(t["parameters"], format="chat"))
    assert (env["FORMAT"], env["LABELS"], env["DATASET_NAME"], env["DATASET_FILES"]) == (
        "chat", "assistant", "HuggingFaceH4/ultrachat_200k", "train_sft-*.parquet"), env
    cmd = yaml_command("ray-train")["command"]
    assert cmd.count("FORMAT=alpaca\n") == 1
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    asked = tmp_path / "asked"
    (stubs / "ray").write_text("#!/bin/sh\nexit 0\n")
    (stubs / "python").write_text(f"#!/bin/sh\necho \"$@\" >> {asked}\nexit 1\n")
    for x in stubs.iterdir():
        x.chmod(0o755)
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", CODE_SOURCE_PATH=str(tmp_path), NODE_RANK="0")
    r = subprocess.run(["bash", "-c", cmd.replace("FORMAT=alpaca\n", "FORMAT=chat\n")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "HuggingFaceH4/ultrachat_200k" in asked.read_text(), r.stdout + r.stderr


def test_chat_data_through_both_examples(ray_ex, fsdp_ex, tools, toks, tmp_path, monkeypatch):
    """train_ray.py's dataprep on chat data (--format chat, the default
    labels assistant, --date), then a real torchrun-fsdp job (--tiny, one
    rank, 3 steps) trains on it: the rows' labels are the assistant tokens
    only, the data_dir check takes the chat policy and refuses another one,
    and a reused data_dir made with another date is refused."""
    import ferry

    a = ray_ex.parse_args(["--format", "chat", "--date", "2026-07-26", "--cpu"])
    assert a.labels == "assistant"
    with pytest.raises(SystemExit):
        ray_ex.parse_args(["--format", "chat", "--labels", "mask-pad"])
    args = ray_args(tools, toks, tmp_path, input=CHAT, seq_len=128, format="chat", labels=a.labels,
                    chat_template=None, date=a.date)
    ray_ex.run_dataprep(args, 2)
    m = ferry.read_manifest(args.data_dir)
    assert m.labels == "assistant" and m.chat["date"] == "2026-07-26" and m.stats["records_read"] == 500
    loader = ferry.Loader(args.data_dir, 4, rank=0, world_size=1, drop_last=True)
    batch = next(iter(loader))
    trained = (batch["labels"][:, 1:] != -100).sum().item()
    assert 0 < trained < batch["attention_mask"].sum().item()
    assert batch["num_items_in_batch"] == trained
    loader.close()
    with pytest.raises(SystemExit, match="date 2026-07-26 != 2026-07-27"):
        ray_ex.run_dataprep(ray_args(tools, toks, tmp_path, input=CHAT, seq_len=128, format="chat",
                                     labels="assistant", chat_template=None, date="2026-07-27"), 2)

    monkeypatch.delenv("HYPERPARAMETERS_PATH", raising=False)
    with pytest.raises(SystemExit, match="labels assistant != mask-pad"):
        fsdp_ex.check_data_dir(fsdp_ex.parse_args(["--tiny", "--data-dir", args.data_dir, "--labels", "mask-pad"]))
    metrics = tmp_path / "metrics.jsonl"
    r = subprocess.run(TORCHRUN + ["--standalone", "--nproc_per_node=1", os.path.join(TORCHRUN_DIR, "train.py"),
                                   "--tiny", "--data-dir", args.data_dir, "--labels", "assistant",
                                   "--output-dir", str(tmp_path / "out"), "--batch-size", "2", "--grad-accum", "1",
                                   "--max-steps", "3", "--metrics-file", str(metrics)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "labels=assistant" in r.stdout
    steps = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert [x["step"] for x in steps] == [1, 2, 3] and all(x["loss"] == x["loss"] for x in steps), steps


def test_ray_dataprep_labels_copy_is_seed_parity(ray_ex, tools, toks, tmp_path):
    assert ray_ex.parse_args([]).labels == "mask-pad"
    assert ray_ex.parse_args(["--labels", "copy"]).labels == "copy"
    args = ray_args(tools, toks, tmp_path, labels="copy")
    ray_ex.run_dataprep(args, 2)
    import ferry

    m = ferry.read_manifest(args.data_dir)
    assert m.labels == "copy" and m.seq_len == 64 and m.ranks == 2
    loader = ferry.Loader(args.data_dir, 2, rank=0, world_size=2, drop_last=True)
    batch = next(iter(loader))
    assert (batch["labels"] == batch["input_ids"]).all()  # the seed's labels = input_ids, pads included
    loader.close()


def test_torchrun_logs_and_checks_labels(fsdp_ex, monkeypatch, tools, toks, tmp_path):
    data = tmp_path / "data"
    subprocess.run([tools.dataprep, "--input", ALPACA, "--tokenizer", toks.qwen, "--seq-len", "64", "--ranks", "2",
                    "--labels", "copy", "--quiet", "--out", str(data)], check=True)
    monkeypatch.delenv("HYPERPARAMETERS_PATH", raising=False)
    args = fsdp_ex.parse_args(["--tiny", "--data-dir", str(data), "--labels", "mask-pad"])
    with pytest.raises(SystemExit, match="labels copy != mask-pad"):
        fsdp_ex.check_data_dir(args)
    fsdp_ex.check_data_dir(fsdp_ex.parse_args(["--tiny", "--data-dir", str(data), "--labels", "copy"]))
    import inspect

    src = inspect.getsource(fsdp_ex.main)
    assert "labels={m.labels}" in src and '"labels": loader.manifest.labels' in src


# --- defect 6: stale data_dir, no auto-resume of an old run ------------------

def test_stale_data_dir_is_refused_or_rebuilt(ray_ex, fsdp_ex, tools, toks, tmp_path, monkeypatch):
    import ferry

    args = ray_args(tools, toks, tmp_path)
    ray_ex.run_dataprep(args, 2)
    assert ferry.data_dir_mismatches(args.data_dir, toks.qwen, 64, "mask-pad") == []
    bad = ferry.data_dir_mismatches(args.data_dir, toks.llama, 128, "copy")
    assert len(bad) == 3 and bad[0].startswith("tokenizer sha256") and bad[1] == "seq_len 64 != 128", bad
    with pytest.raises(SystemExit, match="was made for other data: tokenizer sha256"):
        ray_ex.run_dataprep(ray_args(tools, toks, tmp_path, tokenizer=toks.llama), 2)
    with pytest.raises(SystemExit, match="seq_len 64 != 32"):
        ray_ex.run_dataprep(ray_args(tools, toks, tmp_path, seq_len=32), 2)
    with pytest.raises(SystemExit, match="mode pad != pack"):
        ray_ex.run_dataprep(ray_args(tools, toks, tmp_path, mode="pack"), 2)
    ray_ex.run_dataprep(ray_args(tools, toks, tmp_path, seq_len=32, rebuild_data=True), 2)
    import ferry

    assert ferry.read_manifest(args.data_dir).seq_len == 32
    # torchrun: train.py --check-data, as train.yaml runs it on node 0 before reusing a data_dir
    monkeypatch.delenv("HYPERPARAMETERS_PATH", raising=False)
    ok = fsdp_ex.parse_args(["--check-data", "--data-dir", args.data_dir, "--tokenizer-dir", toks.qwen,
                             "--max-seq-len", "32"])
    fsdp_ex.check_data_dir(ok)
    stale = fsdp_ex.parse_args(["--check-data", "--data-dir", args.data_dir, "--tokenizer-dir", toks.llama])
    with pytest.raises(SystemExit, match="tokenizer sha256"):
        fsdp_ex.check_data_dir(stale)


def test_stand_in_model_refuses_packed_data(ray_ex, fsdp_ex, tools, toks, tmp_path, monkeypatch):
    """The examples' stand-in TinyLM (a running mean over the row) would mix
    packed examples: both examples refuse it on pack-mode data."""
    args = ray_args(tools, toks, tmp_path, mode="pack")
    ray_ex.run_dataprep(args, 2)
    import ferry

    assert ferry.read_manifest(args.data_dir).mode == "pack"
    with pytest.raises(SystemExit, match="is packed, and the stand-in model does not keep packed examples apart"):
        ray_ex.build_model({"cpu": True, "data_dir": args.data_dir}, torch.device("cpu"))
    monkeypatch.delenv("HYPERPARAMETERS_PATH", raising=False)
    targs = fsdp_ex.parse_args(["--tiny", "--data-dir", args.data_dir])
    with pytest.raises(SystemExit, match="is packed, and the stand-in model does not keep packed examples apart"):
        fsdp_ex.build_model(targs, 0, torch.device("cpu"))


def test_new_job_does_not_resume_an_old_run(fsdp_ex, tmp_path, monkeypatch):
    ckpt = tmp_path / "dcp"
    ckpt.mkdir()
    (ckpt / "latest.json").write_text(json.dumps({"checkpoint": "step-00000050", "step": 50, "run_id": "old"}))
    monkeypatch.delenv("HYPERPARAMETERS_PATH", raising=False)
    monkeypatch.delenv("FERRY_RUN_ID", raising=False)
    monkeypatch.setenv("MLFLOW_RUN_ID", "new")
    args = fsdp_ex.parse_args(["--tiny", "--checkpoint-dir", str(ckpt)])
    assert not args.resume
    with pytest.raises(SystemExit, match="checkpoint of an earlier run"):
        fsdp_ex.try_resume(args, None, None, None, 0)
    # asked (--resume), or a retry of the same run: it goes on to load the checkpoint
    for argv, run in ((["--resume"], "new"), ([], "old")):
        monkeypatch.setenv("MLFLOW_RUN_ID", run)
        with pytest.raises(FileNotFoundError, match="ferry-train-state.json"):
            fsdp_ex.try_resume(fsdp_ex.parse_args(["--tiny", "--checkpoint-dir", str(ckpt), *argv]),
                               None, None, None, 0)


# --- defect 4: the merged model in output_dir, pad = eos, generation_config ---

def test_merged_model_loads_from_output_dir(fsdp_ex, ray_ex, tools, toks, tmp_path):
    """A tiny random Llama (Llama-3.1 tokenizer, which has no pad token) ->
    DCP checkpoint -> train.py's hf-meta -> ckptmerge into output_dir ->
    from_pretrained(output_dir): same logits, pad = eos, generation_config."""
    import ferry.dcp
    import transformers

    with open(os.path.join(TORCHRUN_DIR, "train.yaml")) as f:
        cmd = yaml.safe_load(f)["command"]
    assert '"$CKPT_DIR/$LAST" "$OUTPUT_DIR"' in cmd and "$OUTPUT_DIR/hf" not in cmd

    tok = transformers.AutoTokenizer.from_pretrained(toks.llama)
    assert tok.pad_token is None
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ckpt, meta, out = tmp_path / "dcp" / "step-00000001", tmp_path / "dcp" / "hf-meta", tmp_path / "out"
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        ferry.dcp.save_train_state(str(ckpt), model)
    finally:
        dist.destroy_process_group()
    fsdp_ex.save_hf_meta(str(meta), model.config, tok, model.generation_config)
    subprocess.run([tools.ckptmerge, "--force", "--config-from", str(meta), str(ckpt), str(out)], check=True,
                   capture_output=True)
    got = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()  # the seed's from_pretrained(output_dir)
    ids = torch.tensor([tok.encode("Below is an instruction")])
    with torch.no_grad():
        assert torch.equal(got(ids).logits, model(ids).logits)
    saved = transformers.AutoTokenizer.from_pretrained(str(out))
    assert saved.pad_token == saved.eos_token and saved.pad_token is not None
    assert os.path.exists(out / "generation_config.json")
    assert transformers.GenerationConfig.from_pretrained(str(out)).eos_token_id == tok.eos_token_id

    # ray-train: the driver writes the same meta from the downloaded files
    src = tmp_path / "ray-src"
    shutil.copytree(toks.llama, src)
    cfg.save_pretrained(src)
    dst = ray_ex.write_hf_meta(str(src), str(tmp_path / "ray-meta"))
    assert os.path.exists(os.path.join(dst, "generation_config.json"))
    rt = transformers.AutoTokenizer.from_pretrained(dst)
    assert rt.pad_token == rt.eos_token


# --- defect 5: the sample pool is explicit ------------------------------------

def test_ray_max_samples_is_the_seeds_train_slice(ray_ex, tools, toks, tmp_path, capfd):
    import ferry

    with open(ALPACA) as f:
        n = len(json.load(f))
    args = ray_args(tools, toks, tmp_path, max_samples=n - 2)
    ray_ex.run_dataprep(args, 2)
    assert ferry.read_manifest(args.data_dir).stats["records_read"] == n - 2
    with pytest.raises(SystemExit, match=f"records != --max-samples {n - 4}"):
        ray_ex.run_dataprep(ray_args(tools, toks, tmp_path, max_samples=n - 4), 2)
    capfd.readouterr()
    with pytest.raises(subprocess.CalledProcessError):  # dataprep --max-records says why, and writes nothing
        ray_ex.run_dataprep(ray_args(tools, toks, tmp_path, data_dir=str(tmp_path / "d2"), max_samples=n + 1), 2)
    assert f"--max-records {n + 1}: {ALPACA} has only {n} records" in capfd.readouterr().err
    assert not os.path.exists(tmp_path / "d2" / "manifest.json")
    assert ray_ex.parse_args([]).max_samples == 0  # default: all records, as README says


def test_ray_reads_every_file_of_a_split(ray_ex, tools, toks, tmp_path):
    """A split in several parquet files (as datasets lays out bigger ones)
    is read whole, in file order: no record lost, none picked from another
    split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import ferry

    with open(ALPACA) as f:
        recs = json.load(f)
    ds = tmp_path / "ds" / "data"
    ds.mkdir(parents=True)
    cols = ["instruction", "input", "output"]
    for name, part in [("train-00000-of-00002.parquet", recs[:60]), ("train-00001-of-00002.parquet", recs[60:]),
                       ("test-00000-of-00001.parquet", recs[:7])]:
        pq.write_table(pa.table({c: [r[c] for r in part] for c in cols}), ds / name)
    args = ray_args(tools, toks, tmp_path, input=[str(ds / "train-*.parquet")])
    ray_ex.run_dataprep(args, 2)
    m = ferry.read_manifest(args.data_dir)
    assert m.stats["records_read"] == len(recs)
    assert m.raw["input"] == f"{ds}/train-00000-of-00002.parquet, {ds}/train-00001-of-00002.parquet"
    assert ray_ex.parse_args(["--input", "a.parquet", "b.parquet"]).input == ["a.parquet", "b.parquet"]


# --- defect 8: the Ray example resumes from Ray's checkpoint ------------------

def test_ray_resumes_from_the_reported_checkpoint(ray_ex, tools, toks, tmp_path, monkeypatch):
    import contextlib
    import inspect

    import ferry
    import torch.distributed as dist

    src = inspect.getsource(ray_ex.main)
    assert "FailureConfig(max_failures=args.max_failures)" in src and ray_ex.parse_args([]).max_failures >= 1
    args = ray_args(tools, toks, tmp_path)
    ray_ex.run_dataprep(args, 1)
    config = {"cpu": True, "vocab_size": 64, "checkpoint_dir": str(tmp_path / "ckpt"), "data_dir": args.data_dir}
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        model, _ = ray_ex.build_model(config, torch.device("cpu"))
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        loader = ferry.Loader(args.data_dir, 2, rank=0, world_size=1, drop_last=True)
        it = iter(loader)
        for _ in range(3):
            out = model(**ferry.to_device(next(it), torch.device("cpu")))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
        path = ray_ex.save_checkpoint(config, model, opt, loader, 3)
        want_next = next(it)["input_ids"].clone()
        want_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        loader.close()

        class Ckpt:
            @contextlib.contextmanager
            def as_directory(self):
                yield path

        monkeypatch.setattr(ray_ex, "_ray_train", lambda: types.SimpleNamespace(get_checkpoint=lambda: Ckpt()))
        torch.manual_seed(123)
        model2, _ = ray_ex.build_model(dict(config, seed=1), torch.device("cpu"))
        opt2 = torch.optim.AdamW(model2.parameters(), lr=0.01)
        loader2 = ferry.Loader(args.data_dir, 2, rank=0, world_size=1, drop_last=True)
        assert ray_ex.resume(model2, opt2, loader2, 0) == 3
        for k, v in model2.state_dict().items():
            assert torch.equal(v, want_state[k]), k
        assert torch.equal(next(iter(loader2))["input_ids"], want_next)  # the next sample, none lost or repeated
        loader2.close()
    finally:
        dist.destroy_process_group()


def test_ray_several_nodes_need_shared_paths(ray_ex):
    one = ray_ex.parse_args([])  # the YAML's single-node defaults: /local_disk0, /tmp/ray_results
    ray_ex.check_shared_paths(one, 1)
    with pytest.raises(SystemExit, match="node-local"):
        ray_ex.check_shared_paths(one, 2)
    shared = ray_ex.parse_args(["--data-dir", "/Volumes/v/data", "--checkpoint-dir", "/Volumes/v/dcp",
                                "--storage-path", "/Volumes/v/ray"])
    ray_ex.check_shared_paths(shared, 2)
