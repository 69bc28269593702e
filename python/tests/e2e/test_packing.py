"""Pack mode with the real transformers: the documents of a packed row never
see each other, and the loss is the mean over the optimizer step's tokens.

* Equivalence: tiny random-init Llama and Qwen2 (fp32, CPU) on real ferry
  pack-mode batches (dataprep on the bundled Alpaca sample, batch size 4,
  several documents per row): every document's logits inside the packed
  batch equal its logits run alone (max abs diff <= 1e-4), on eager, sdpa
  and flex_attention.
* Gradients: 2 ranks x 2 accumulation micro-batches under torchrun/gloo give
  the gradients of one step on the same documents, each run alone
  (unpadded), with a token-mean loss (relative diff <= 1e-5).
* Refusals: ferry.check_packing raises PackingError, with what to do, for
  each combination on which the layout cannot isolate; where the installed
  stack can run that combination, the test also shows the leak it prevents.

Nothing here skips: what cannot run on this machine says why in a failure.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import ferry
import ferry.packing
from ferry.shards import read_loss_tokens
from helpers import REPO, TESTS, build_go_tool

pytestmark = [
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
    pytest.mark.filterwarnings("ignore:_compile flag on create_block_mask"),
]

WORKERS = os.path.join(TESTS, "packing_workers")
sys.path.insert(0, WORKERS)
import tiny  # noqa: E402

ALPACA = os.path.join(REPO, "testdata", "alpaca", "alpaca_tiny.json")
TOKENIZERS = {"llama": ("llama3.1", "<|end_of_text|>"), "qwen2": ("qwen2.5", "<|endoftext|>")}
SEQ_LEN = 256
TOL_LOGITS = 1e-4
TOL_GRAD = 1e-5
# What a leak moves some logits by, at least (measured: 0.3 on sdpa with a
# cache, 8e-3 through Qwen3-Next's linear-attention layer), against ~1e-7
# for isolated documents.
LEAK = 10 * TOL_LOGITS


@pytest.fixture(scope="module")
def pack_data(tmp_path_factory):
    """{"llama": dir, "qwen2": dir}: dataprep --mode pack of the Alpaca
    sample with each model family's tokenizer, seq_len 256, 2 ranks."""
    root = tmp_path_factory.mktemp("pack")
    exe = os.environ.get("FERRY_DATAPREP") or build_go_tool("cmd/dataprep", str(root))
    out = {}
    for arch, (tok, eos) in TOKENIZERS.items():
        d = str(root / arch)
        cmd = [exe, "--input", ALPACA, "--tokenizer", os.path.join(REPO, "testdata", "tokenizers", tok), "--eos", eos,
               "--seq-len", str(SEQ_LEN), "--ranks", "2", "--mode", "pack", "--out", d, "--quiet"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}"
        out[arch] = d
    return out


def packed_vs_alone(model, data, batches=2, batch_size=4, drop=(), **overrides):
    """Max abs diff, over every document of the first `batches` batches of
    rank 0, between its logits in the packed batch and alone; and the number
    of documents. Documents come from the shard's segments column, not from
    ferry's cu_seq_lens (an independent account of the boundaries)."""
    ld = ferry.Loader(data, batch_size, rank=0, world_size=2, shuffle=False)
    sched = ld.schedule()[:batches]
    worst, docs, rows_with_several = 0.0, 0, 0
    with torch.no_grad():
        for (shard, row, rows), b in zip(sched, ld):
            assert "attention_mask" not in b
            batch = tiny.device_batch(b)
            batch.update(overrides)
            for k in drop:
                del batch[k]
            logits = model(**batch).logits
            assert logits.shape[:2] == (rows, SEQ_LEN)
            sf = ld.shards.shard(shard)
            for r in range(rows):
                segs = sf.segments(row + r)
                rows_with_several += len(segs) > 1
                for _, start, length in segs:
                    ids = batch["input_ids"][r:r + 1, start:start + length]
                    alone = model(input_ids=ids, use_cache=False).logits[0]
                    worst = max(worst, (alone - logits[r, start:start + length]).abs().max().item())
                    docs += 1
    assert rows_with_several >= 2, "the batches should hold rows of several documents"
    return worst, docs


# flex_attention: transformers runs it through torch.compile, and the CPU
# build needs Inductor's C++ toolchain for that; see flex_mode().
FLEX_COMPILE = os.environ.get("FERRY_TEST_FLEX_COMPILE") == "1"


@pytest.fixture
def flex_mode(monkeypatch):
    """Unless FERRY_TEST_FLEX_COMPILE=1: run transformers' flex path (its
    BlockMask built from position_ids, its flex_attention call) with torch's
    unfused flex_attention instead of the torch.compile'd kernel. The
    compiled kernel computes the same masked attention; compiling it with
    Inductor on CPU takes minutes on a 2-core machine (and a C++ toolchain),
    which is why it is opt-in here."""
    if FLEX_COMPILE:
        return "compiled"
    from torch.nn.attention.flex_attention import flex_attention

    import transformers.integrations.flex_attention as fa

    monkeypatch.setattr(fa, "compile_friendly_flex_attention",
                        lambda q, k, v, training=False, **kw: flex_attention(q, k, v, **kw))
    return "unfused (set FERRY_TEST_FLEX_COMPILE=1 for the compiled kernel)"


@pytest.mark.parametrize("impl", ["eager", "sdpa", "flex_attention"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_documents_in_a_packed_batch_see_only_themselves(pack_data, arch, impl, request):
    if impl == "flex_attention":
        mode = request.getfixturevalue("flex_mode")
        print(f"flex_attention: {mode}")
    model = tiny.build(arch, impl).eval()
    how = ferry.check_packing(model)
    worst, docs = packed_vs_alone(model, pack_data[arch])
    print(f"{arch} {impl}: {docs} documents, max abs logit diff packed vs alone {worst:.3g}; {how}")
    assert docs >= 6
    assert worst <= TOL_LOGITS, f"{arch} {impl}: a document's logits change by {worst} when packed"


def test_leak_control_cache_and_attention_mask(pack_data):
    """The equivalence check sees a leak: the same batch with a cache
    (use_cache=True, what config.use_cache gives when ferry's use_cache=False
    is left out) or with an all-ones attention_mask lets documents attend to
    each other on sdpa."""
    model = tiny.build("llama", "sdpa").eval()
    worst, _ = packed_vs_alone(model, pack_data["llama"], batches=1, use_cache=True)
    assert worst > LEAK, f"use_cache=True: diff {worst}, expected a leak"
    b = tiny.device_batch(next(iter(ferry.Loader(pack_data["llama"], 4, rank=0, world_size=2, shuffle=False))))
    ones = torch.ones_like(b["input_ids"])
    worst, _ = packed_vs_alone(model, pack_data["llama"], batches=1, attention_mask=ones)
    assert worst > LEAK, f"all-ones attention_mask: diff {worst}, expected a leak"


def test_pack_batch_layout(pack_data):
    """cu_seq_lens mark every document start in the flattened rows; the
    rest of the batch is the shard's zero-copy views."""
    ld = ferry.Loader(pack_data["qwen2"], 4, rank=1, world_size=2, shuffle=False)
    (shard, row, rows), = ld.schedule()[:1]
    b = next(iter(ld))
    assert list(b) == ["input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                       "max_length_k", "use_cache", "num_items_in_batch"]
    sf = ld.shards.shard(shard)
    want = [r * SEQ_LEN + s for r in range(rows) for _, s, _ in sf.segments(row + r)] + [rows * SEQ_LEN]
    assert b["cu_seq_lens_q"].dtype == torch.int32 and b["cu_seq_lens_q"].tolist() == want
    assert b["cu_seq_lens_k"] is b["cu_seq_lens_q"]
    assert b["max_length_q"] == b["max_length_k"] == max(np.diff(want))
    assert b["use_cache"] is False
    d = ferry.to_device(b, "cpu")
    assert list(d)[:3] == ["input_ids", "labels", "position_ids"]
    assert d["position_ids"].dtype == torch.int64 and d["cu_seq_lens_q"].dtype == torch.int32
    assert d["cu_seq_lens_k"] is d["cu_seq_lens_q"]


# -- the loss ------------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gradients_are_the_global_token_mean(pack_data, tmp_path):
    """One optimizer step of 2 ranks x 2 micro-batches (DDP, gloo) on packed
    batches = one step on the same documents, each run alone and unpadded,
    with the loss summed over all their loss tokens / their number."""
    data = pack_data["llama"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", os.path.join(WORKERS, "grad_worker.py"), data, str(tmp_path), "sdpa"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, f"grad_worker exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    fed = [json.load(open(tmp_path / f"rank-{k}.json")) for k in range(2)]
    got = torch.load(tmp_path / "grads.pt")
    W = fed[0]["world_size"]
    micro = [b for f in fed for b in f["batches"]]
    A = len(fed[0]["batches"])
    assert W == 2 and A == 2 and len(micro) == 4
    assert fed[0]["state"] == fed[1]["state"] and fed[0]["state"]["accum_phase"] == 0

    # Every micro-batch carries the step's loss-token count over W * A.
    N = sum(ferry.loss_tokens(torch.tensor(b["labels"])) for b in micro)
    counts = [ferry.loss_tokens(torch.tensor(b["labels"])) for b in micro]
    assert len(set(counts)) > 1, "micro-batches with equal token counts would not test the normalisation"
    for b in micro:
        assert b["num_items_in_batch"] == pytest.approx(N / (W * A), rel=1e-6)

    # The reference: every document alone, one graph, token-mean loss.
    model = tiny.build("llama", "sdpa")
    model.train()
    total, docs = 0.0, 0
    for b in micro:
        ids, labels = torch.tensor(b["input_ids"]), torch.tensor(b["labels"])
        cu = b["cu_seq_lens_q"]
        for s, e in zip(cu[:-1], cu[1:]):
            r, a, z = s // SEQ_LEN, s % SEQ_LEN, (e - 1) % SEQ_LEN + 1
            logits = model(input_ids=ids[r:r + 1, a:z], use_cache=False).logits[0]
            total = total + torch.nn.functional.cross_entropy(logits[:-1], labels[r, a + 1:z], ignore_index=-100,
                                                              reduction="sum")
            docs += 1
    (total / N).backward()
    want = {n: p.grad for n, p in model.named_parameters()}
    assert sorted(got) == sorted(want)
    rel = {n: ((got[n] - want[n]).norm() / want[n].norm()).item() for n in want}
    worst = max(rel, key=rel.get)

    # What HF's default (per micro-batch mean, averaged) would have given.
    model.zero_grad()
    default = 0.0
    for b in micro:
        batch = {k: (torch.tensor(v) if isinstance(v, list) else v) for k, v in b.items() if k not in ("loss",)}
        batch.pop("num_items_in_batch")
        default = default + model(**batch).loss / (W * A)
    default.backward()
    off = max(((p.grad - want[n]).norm() / want[n].norm()).item() for n, p in model.named_parameters())
    print(f"{docs} documents, {N} loss tokens (per micro-batch {counts}): max grad rel diff {rel[worst]:.3g} "
          f"({worst}); HF's per-micro-batch mean would be off by {off:.3g}")
    assert rel[worst] <= TOL_GRAD, f"{worst}: gradient rel diff {rel[worst]}"
    assert off > 100 * TOL_GRAD


def take(loader, n):
    """n batches, iterating the loader again at epoch ends (as a training loop does)."""
    out = []
    while len(out) < n:
        out.extend(b for _, b in zip(range(n - len(out)), loader))
    return out


def test_num_items_follows_the_step_across_epochs_and_resume(make_shards):
    """grad_accum windows run across epoch ends and survive a resume in the
    middle of a step; each window's count is the loss tokens of its
    micro-batches on every rank."""
    d = make_shards(ranks=2, rows=150, seq_len=16, mode="pack")
    W, A, B = 2, 4, 2
    loaders = [ferry.Loader(d, B, rank=r, world_size=W, grad_accum=A) for r in range(W)]
    steps = loaders[0].steps_per_epoch
    assert steps % A, "the epoch length should not be a multiple of grad_accum"
    seq = []  # per micro-batch: (loss tokens of all ranks, num_items of rank 0)
    its = [iter(ld) for ld in loaders]
    for _ in range(2 * steps + 1):
        got = []
        for k, ld in enumerate(loaders):
            b = next(its[k], None)
            if b is None:
                its[k] = iter(ld)
                b = next(its[k])
            got.append(b)
        seq.append((sum(ferry.loss_tokens(b["labels"]) for b in got), got[0]["num_items_in_batch"].item()))
        assert len({b["num_items_in_batch"].item() for b in got}) == 1
    for w in range(len(seq) // A):
        window = seq[w * A:(w + 1) * A]
        n = sum(t for t, _ in window)
        assert all(x == pytest.approx(n / (W * A)) for _, x in window), f"window {w}"
    # Resume in the middle of a window (same world size): the same counts.
    ref = ferry.Loader(d, B, rank=0, world_size=W, grad_accum=A)
    it = iter(ref)
    for _ in range(A + 1):
        next(it)
    state = ref.state_dict()
    assert state["accum_phase"] == 1
    again = ferry.Loader(d, B, rank=0, world_size=W, grad_accum=A)
    again.load_state_dict(state)
    assert [b["num_items_in_batch"].item() for b in take(again, A)] == [x for _, x in seq[A + 1:2 * A + 1]]
    # ... but not on another world size or grad_accum.
    for kw in ({"rank": 0, "world_size": 1, "grad_accum": A}, {"rank": 0, "world_size": W, "grad_accum": 2}):
        with pytest.raises(ferry.StateError, match="optimizer-step boundaries"):
            ferry.Loader(d, B, **kw).load_state_dict(state)


def test_num_items_with_dataloader_workers(make_shards):
    """ferry.DataLoader workers give the same num_items_in_batch sequence
    and the same resume state as the loader in-process."""
    d = make_shards(ranks=2, rows=150, seq_len=16, mode="pack")
    kw = dict(rank=1, world_size=2, grad_accum=3)
    want = [b["num_items_in_batch"].item() for b in ferry.Loader(d, 2, **kw)]
    ld = ferry.Loader(d, 2, **kw)
    dl = ferry.DataLoader(ld, num_workers=2)
    got = []
    for b in dl:
        got.append(b["num_items_in_batch"].item())
        if len(got) == 4:
            state = dl.state_dict()
    assert got == want
    assert state["accum_phase"] == 1 and state["consumed_blocks"] == 8
    again = ferry.Loader(d, 2, **kw)
    again.load_state_dict(state)
    assert [b["num_items_in_batch"].item() for b in again] == want[4:]


@pytest.mark.parametrize("labels", ["mask-pad", "copy", "mask-prompt"])
@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_loss_token_count_of_every_row(make_shards, pack_data, mode, labels):
    """The per-row counts behind num_items_in_batch (from the length and
    segment columns for mask-pad and copy) equal the labels' own count."""
    dirs = [make_shards(ranks=2, rows=90, seq_len=16, mode=mode, extra=("-labels", labels, "-batch-rows", "8"))]
    if (mode, labels) == ("pack", "mask-pad"):
        dirs += list(pack_data.values())
    for d in dirs:
        with ferry.ShardSet(d) as ss:
            side = read_loss_tokens(d)  # dataprep's loss_tokens.u32
            assert side.shape == (ss.manifest.ranks, ss.manifest.rows_per_rank)
            for r in range(ss.manifest.ranks):
                sf = ss.shard(r)
                rows = sf.entry["rows"]
                lab = np.concatenate([sf.span(k, 1)[0]["labels"] for k in range(rows)])
                want = [ferry.loss_tokens(lab[k]) for k in range(rows)]
                assert [sf.loss_tokens(k, 1) for k in range(rows)] == want, d
                assert sf.loss_tokens(0, rows) == sum(want)
                assert side[r].tolist() == want, d


def test_causal_lm_loss_is_hf_loss(pack_data):
    """ferry.causal_lm_loss (for models that are not transformers models)
    gives what HF's loss gives, with and without num_items_in_batch."""
    model = tiny.build("qwen2", "sdpa").eval()
    b = tiny.device_batch(next(iter(ferry.Loader(pack_data["qwen2"], 2, rank=0, world_size=2))))
    with torch.no_grad():
        out = model(**b)
        plain = {k: v for k, v in b.items() if k != "num_items_in_batch"}
        hf_mean = model(**plain).loss
    assert torch.allclose(ferry.causal_lm_loss(out.logits, b["labels"], b["num_items_in_batch"]), out.loss)
    assert torch.allclose(ferry.causal_lm_loss(out.logits, b["labels"]), hf_mean)


# -- refusals ------------------------------------------------------------------------------
def test_refuses_a_model_that_is_not_a_transformers_model():
    class Custom(torch.nn.Module):
        def forward(self, input_ids, **kw):
            return input_ids

    with pytest.raises(ferry.PackingError, match="not a Hugging Face transformers model.*--mode pad"):
        ferry.check_packing(Custom())


def test_refuses_an_unknown_attention_implementation_and_it_would_leak(pack_data):
    """A custom attention function registered without a mask function gets
    no mask from transformers: documents attend to each other."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("ferry_test_attention", sdpa_attention_forward)
    model = tiny.build("llama", "ferry_test_attention").eval()
    with pytest.raises(ferry.PackingError, match="'ferry_test_attention'.*attn_implementation= one of"):
        ferry.check_packing(model)
    worst, _ = packed_vs_alone(model, pack_data["llama"], batches=1)
    assert worst > LEAK


@pytest.mark.parametrize("versions,impl,match", [
    (((4, 52, 4), (2, 15, 0)), "sdpa", "transformers before 4.53.*upgrade transformers"),
    (((4, 57, 6), (2, 5, 1)), "sdpa", "torch before 2.6.*ignores the per-document mask on sdpa"),
    (((4, 57, 6), (2, 5, 1)), "eager", "torch before 2.6"),
])
def test_refuses_old_versions(monkeypatch, versions, impl, match):
    """The version rules (the installed versions cannot be changed in a test:
    ferry's view of them is)."""
    model = tiny.build("llama", impl)
    monkeypatch.setattr(ferry.packing, "_installed_versions", lambda: versions)
    with pytest.raises(ferry.PackingError, match=match):
        ferry.check_packing(model)


def test_refuses_a_model_that_does_not_build_masks_with_masking_utils():
    class OldStyleLM(transformers.PreTrainedModel):
        config_class = transformers.LlamaConfig

        def __init__(self, config):
            super().__init__(config)
            self.emb = torch.nn.Embedding(config.vocab_size, 8)

        def forward(self, input_ids, **kw):
            return self.emb(input_ids)

    cfg = transformers.LlamaConfig(**tiny.SIZES)
    with pytest.raises(ferry.PackingError, match="masking_utils"):
        ferry.check_packing(OldStyleLM(cfg))


def test_refuses_linear_attention_layers_and_they_would_leak(pack_data):
    """Qwen3-Next's gated-delta-net layers carry state from one document
    into the next: with position_ids alone the documents leak; with
    cu_seq_lens the torch fallback of its kernel refuses (transformers says
    to install flash-linear-attention, whose varlen kernel wants one
    flattened row and a seq_idx for the convolution, which ferry does not
    give)."""
    cfg = transformers.Qwen3NextConfig(
        vocab_size=tiny.VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, layer_types=["linear_attention", "full_attention"],
        max_position_embeddings=512)
    torch.manual_seed(0)
    model = transformers.Qwen3NextForCausalLM._from_config(cfg, attn_implementation="sdpa").eval()
    with pytest.raises(ferry.PackingError, match="linear-attention layers.*--mode pad"):
        ferry.check_packing(model)
    worst, _ = packed_vs_alone(model, pack_data["qwen2"], batches=1,
                               drop=("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"))
    assert worst > LEAK
    b = tiny.device_batch(next(iter(ferry.Loader(pack_data["qwen2"], 4, rank=0, world_size=2))))
    try:
        model(**b)
    except (ValueError, RuntimeError, ImportError) as e:
        print(f"Qwen3-Next with ferry's batch: {type(e).__name__}: {e}")
    else:
        worst, _ = packed_vs_alone(model, pack_data["qwen2"], batches=1)
        assert worst > LEAK, "Qwen3-Next isolates packed documents here: check_packing could allow it"


def test_check_looks_through_wrappers_and_subclasses():
    model = tiny.build("qwen2", "sdpa")
    assert "Qwen2ForCausalLM" in ferry.check_packing(torch.compile(model))
    # A user's subclass that keeps transformers' forward, and a class made
    # the way FSDP2's fully_shard makes one (FSDP<Model>, module torch.*).
    for name, module in (("MyQwen2", __name__), ("FSDPQwen2ForCausalLM", "torch.distributed.fsdp._fully_shard")):
        cls = type(name, (transformers.Qwen2ForCausalLM,), {"__module__": module})
        torch.manual_seed(0)
        assert name in ferry.check_packing(cls._from_config(transformers.Qwen2Config(**tiny.SIZES),
                                                            attn_implementation="sdpa"))
