"""Run by torchrun (CPU, gloo): ferry.load_pretrained against from_pretrained
on the same wrapping, for the inputs of test_load.py.

    python -m torch.distributed.run --nproc_per_node=N load_worker.py --models DIR --out DIR \
        [--cases llama/fsdp2,qwen2/fsdp1@serve,llama/none@s3,...] [--serve SOCKET] [--s3 s3://B/P]

DIR/ARCH is a model saved by save_pretrained in several shard files. For each
case ARCH/WRAP (WRAP: fsdp2, fsdp1, none):

  reference  from_pretrained(DIR/ARCH) on every rank, then the wrapping
             (fsdp2: fully_shard on every decoder layer and the root; fsdp1:
             the seeds' auto-wrap on the decoder layer class with
             use_orig_params=True; none: DDP)
  ferry      the model built from its config on the meta device (fsdp1 with
             tied weights: on CPU, see ferry.load), wrapped the same way (none: wrapped by DDP
             after loading), then ferry.load_pretrained(model, SOURCE)

and compares every parameter and buffer, gathered whole, bit for bit; then
runs one AdamW step on both with the same batch and compares again. A case
ending in @serve loads through ferry-serve (--serve), one ending in @s3
from the s3:// prefix --s3 through ferry-serve; ARCH/WRAP~DTYPE builds both
models in DTYPE (from_pretrained(dtype=DTYPE), load_pretrained(dtype=DTYPE)). Each
rank writes OUT/CASE.RANK.json: the mismatches found (none is a pass), the
bytes it read, the number of tensors compared, and whether the comparison
caught a one-element change made on purpose (the control).
"""

import argparse
import functools
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

import ferry
import tiny_models


def wrap(model, how, meta=False):
    import transformers

    if how == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model
    if how == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        layer_cls = {type(m) for m in model.modules() if isinstance(m, transformers.GradientCheckpointingLayer)}
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer_cls)
        init = (lambda m: m.to_empty(device=torch.device("cpu"), recurse=False)) if meta else None
        return FSDP(model, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"),
                    param_init_fn=init)
    if how == "none":
        return torch.nn.parallel.DistributedDataParallel(model)
    raise ValueError(how)


def full_tensors(model):
    """Every parameter and persistent buffer (gathered whole) and every
    non-persistent buffer, by name."""
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
    out = {k: v.detach().clone() for k, v in sd.items()}
    inner = model.module if hasattr(model, "module") else model
    for name, b in inner.named_buffers():
        name = name.replace("_fsdp_wrapped_module.", "")
        if name not in out:
            out[name] = b.detach().clone()
    return out


def same_bits(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)))


def compare(want, got):
    bad = []
    for k in sorted(set(want) | set(got)):
        if k not in want or k not in got:
            bad.append(f"{k}: only in {'reference' if k in want else 'ferry'}")
        elif not same_bits(want[k], got[k]):
            bad.append(f"{k}: differs ({want[k].dtype} {list(want[k].shape)} vs {got[k].dtype} "
                       f"{list(got[k].shape)})")
    return bad


def step(model, vocab, seed):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = tiny_models.batch(vocab, seed)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()


def run_case(arch, how, models, source, serve, dtype):
    import transformers

    cfg = tiny_models.config(arch)
    ref = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(models, arch), dtype=dtype,
                                                            attn_implementation="eager")
    ref = wrap(ref, how)
    # FSDP1 materialises a meta model module by module, which unties tied
    # weights: a tied model is built on CPU for it (ferry.load's doc)
    meta = not (how == "fsdp1" and cfg.tie_word_embeddings)
    torch.manual_seed(1234)
    with torch.device("meta" if meta else "cpu"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    if how != "none":
        model = wrap(model, how, meta=meta)
    stats = {}
    ferry.load_pretrained(model, source, serve=serve, dtype=dtype, stats=stats)
    if how == "none":
        model = wrap(model, how)
    meta = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    want, got = full_tensors(ref), full_tensors(model)
    bad = compare(want, got)
    # the control: one element changed on this rank must be caught
    p = next(t for _, t in model.named_parameters() if (t.to_local() if hasattr(t, "to_local") else t).numel())
    local = p.to_local() if hasattr(p, "to_local") else p
    with torch.no_grad():
        old = local.view(-1)[0].clone()
        local.view(-1)[0] += 1
    caught = bool(compare(want, full_tensors(model)))
    with torch.no_grad():
        local.view(-1)[0] = old
    step(ref, cfg.vocab_size, 7)
    step(model, cfg.vocab_size, 7)
    bad_after = compare(full_tensors(ref), full_tensors(model))
    return dict(mismatches=bad, mismatches_after_step=bad_after, meta=meta, bytes=stats["bytes"],
                tensors=len(want), control_caught=caught, tied=model_tied(model),
                seconds=stats["seconds"])


def model_tied(model):
    inner = model
    while hasattr(inner, "module"):
        inner = inner.module
    inner = getattr(inner, "_fsdp_wrapped_module", inner)
    return inner.lm_head.weight is inner.model.embed_tokens.weight


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="llama/fsdp2,qwen2/fsdp2,llama/fsdp1,qwen2/fsdp1,llama/none,qwen2/none")
    ap.add_argument("--serve", default=None, help="ferry-serve's socket, for cases ARCH/WRAP@serve and @s3")
    ap.add_argument("--s3", default=None, help="s3:// prefix holding the models, for cases ARCH/WRAP@s3")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for case in args.cases.split(","):
        case, _, via = case.partition("@")
        case, _, dt = case.partition("~")
        dtype = getattr(torch, dt) if dt else getattr(torch, args.dtype)
        arch, how = case.split("/")
        source, serve = os.path.join(args.models, arch), None
        if via == "serve":
            serve = args.serve
        elif via == "s3":
            source, serve = args.s3.rstrip("/") + "/" + arch, args.serve
        t0 = time.monotonic()
        try:
            res = run_case(arch, how, args.models, source, serve, dtype)
        except Exception as e:  # reported, not hidden: the test fails on it
            import traceback

            res = dict(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        res["wall"] = time.monotonic() - t0
        name = f"{arch}-{how}" + (f"-{dt}" if dt else "") + (f"-{via}" if via else "")
        with open(os.path.join(args.out, f"{name}.{rank}.json"), "w") as f:
            json.dump(res, f)
        dist.barrier()
    dist.destroy_process_group()
    # Leave without the interpreter's teardown, where torch/gloo can abort
    # (exit -6) after everything is written: see save_checkpoints.py.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
