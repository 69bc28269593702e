"""Run by torchrun (CPU, gloo): real torch.distributed.checkpoint (DCP)
checkpoints of tiny random-init transformers models after one AdamW step,
the inputs of test_ckpt_torch2.py.

    python -m torch.distributed.run --nproc_per_node=N save_checkpoints.py --out DIR [--jobs A,B]

One launch runs every job (imports and rendezvous once); job J writes under
DIR/J/ several checkpoints of the same trained weights:

  base/            the model before training: model.save_pretrained
                   (config.json, generation_config.json, model.safetensors);
                   ckptmerge's --config-from
  reference.pt     the trained weights, unsharded (get_model_state_dict with
                   full_state_dict=True), torch.save by rank 0: "the model
                   that was saved"
  fsdp1/           llama-fsdp1: the seeds' FSDP1 wrapping (auto_wrap on the
                   decoder layer class, use_orig_params=True), then
                   FSDP.state_dict_type(SHARDED_STATE_DICT) + model.state_dict()
                   + dcp.save: ShardedTensor chunks
  fsdp2/           qwen2-fsdp2: fully_shard on every decoder layer and the
                   root, dcp.save(get_model_state_dict(model)): DTensor chunks
  hf/              qwen2-fsdp2: dcp.save(get_model_state_dict(model),
                   storage_writer=HuggingFaceStorageWriter(save_distributed=True)):
                   per-rank safetensors shards with DCP_SHARDING_INFO, no
                   .metadata; without lm_head.weight, which is tied (the
                   writer refuses shared tensors)
  train-state/     ferry.dcp.save_train_state(model, optimizer):
                   dcp.save({"model": ..., "optim": ...}) from get_state_dict
  app-state/       the PyTorch DCP recipe's layout: dcp.save({"app": AppState})
                   where AppState.state_dict() is {"model": ..., "optim": ...}
                   from get_state_dict

and rank 0 writes DIR/done last.
"""

import argparse
import functools
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict
from torch.distributed.checkpoint.stateful import Stateful

import ferry.dcp
import tiny_models


class AppState(Stateful):
    """The PyTorch distributed-checkpoint recipe's wrapper."""

    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def state_dict(self):
        msd, osd = get_state_dict(self.model, self.optimizer)
        return {"model": msd, "optim": osd}

    def load_state_dict(self, state_dict):  # pragma: no cover - save only
        raise NotImplementedError


def wrap_fsdp1(model, layer_cls):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={layer_cls})
    return FSDP(model, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                device_id=torch.device("cpu"), use_orig_params=True)


def wrap_fsdp2(model, layer_cls):
    from torch.distributed.fsdp import fully_shard

    for m in model.modules():
        if isinstance(m, layer_cls):
            fully_shard(m)
    fully_shard(model)
    return model


JOBS = {"llama-fsdp1": ("llama", wrap_fsdp1), "qwen2-fsdp2": ("qwen2", wrap_fsdp2)}


def save_job(name, out):
    """Trains one step and writes every checkpoint of one job under out."""
    arch, wrap = JOBS[name]
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = tiny_models.build(arch)
    if rank == 0:
        model.save_pretrained(os.path.join(out, "base"))
    model = wrap(model, type(model.model.layers[0]))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    ids = tiny_models.batch(tiny_models.CONFIGS[arch]["vocab_size"], seed=1 + rank)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()

    path = functools.partial(os.path.join, out)
    if wrap is wrap_fsdp1:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            dcp.save(model.state_dict(), checkpoint_id=path("fsdp1"))
    else:
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        msd = get_model_state_dict(model)
        dcp.save(msd, checkpoint_id=path("fsdp2"))
        if tiny_models.CONFIGS[arch]["tie_word_embeddings"]:
            # torch's HF writer refuses tensors that share storage; like
            # save_pretrained, leave the tied copy out
            msd = {k: v for k, v in msd.items() if k != "lm_head.weight"}
        dcp.save(msd, storage_writer=HuggingFaceStorageWriter(path("hf"), save_distributed=True))
    assert ferry.dcp.save_train_state(path("train-state"), model, opt), "the optimizer was not saved"
    dcp.save({"app": AppState(model, opt)}, checkpoint_id=path("app-state"))

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save(full, path("reference.pt"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", default=",".join(JOBS), help="comma-separated, of: " + ", ".join(JOBS))
    a = p.parse_args()

    dist.init_process_group("gloo")
    for name in a.jobs.split(","):
        t = time.monotonic()
        save_job(name, os.path.join(a.out, name))
        if dist.get_rank() == 0:
            print(f"{name}: {time.monotonic() - t:.1f}s", flush=True)
    dist.barrier()
    if dist.get_rank() == 0:
        with open(os.path.join(a.out, "done"), "w") as f:
            f.write("ok\n")
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: once in several fresh-clone
    # runs of `make test`, rank 0 aborted there ("terminate called without
    # an active exception", exit -6) after every file above was written and
    # closed and the group destroyed: a C++ thread of torch's still joinable
    # at exit (pytorch/pytorch#179291 describes gloo's). What the test checks
    # is all on disk by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
