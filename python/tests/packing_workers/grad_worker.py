"""torchrun worker of test_packing.py's gradient test.

Each rank runs one optimizer step's worth of ferry pack-mode micro-batches
(GRAD_ACCUM of them, batch size BATCH) through a tiny Llama under DDP on
gloo, with the README's loop: ``(model(**batch).loss / grad_accum)
.backward()``, no_sync on all but the last micro-batch. It writes what it
fed (rank-N.json) and, on rank 0, the averaged gradients (grads.pt) for the
test to compare with one big unpadded step in the test process.

    python -m torch.distributed.run --nproc_per_node=2 grad_worker.py DATA OUT IMPL"""

import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny  # noqa: E402

import ferry  # noqa: E402

GRAD_ACCUM = 2
BATCH = 2


def main():
    data, out, impl = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = tiny.build("llama", impl)
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ferry.check_packing(ddp)
    loader = ferry.Loader(data, BATCH, drop_last=True, grad_accum=GRAD_ACCUM, num_items_in_batch=True)
    fed = []
    it = iter(loader)
    for i in range(GRAD_ACCUM):
        batch = tiny.device_batch(next(it))
        sync = contextlib.nullcontext() if i == GRAD_ACCUM - 1 else ddp.no_sync()
        with sync:
            loss = ddp(**batch).loss
            (loss / GRAD_ACCUM).backward()
        fed.append({k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()})
        fed[-1]["loss"] = loss.item()
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"world_size": dist.get_world_size(), "batches": fed, "state": loader.state_dict()}, f)
    if rank == 0:
        torch.save({n: p.grad.detach().clone() for n, p in model.named_parameters()}, os.path.join(out, "grads.pt"))
    dist.barrier()
    dist.destroy_process_group()
    # Leave without the interpreter's teardown, where torch/gloo can abort
    # (exit -6) after everything is written: see
    # ../dcp_workers/save_checkpoints.py.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
