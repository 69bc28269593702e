"""Where this process sits in the job: rank, world size, local rank.

Resolution order (first that answers wins):

1. explicit ``rank=`` / ``world_size=`` arguments;
2. torchrun's environment: ``RANK``, ``WORLD_SIZE`` (``LOCAL_RANK`` optional);
3. Ray Train's context, when ``ray`` is importable and a Train session is
   active (``ray.train.get_context()``);
4. an initialized ``torch.distributed`` process group;
5. a single process: rank 0 of 1.
"""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    source: str


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"environment variable {name}={v!r} is not an integer") from None


def _ray_context():
    try:
        import ray.train as rt
    except Exception:
        return None
    try:
        ctx = rt.get_context()
        ws = ctx.get_world_size()
        if ws is None:
            return None
        return DistInfo(int(ctx.get_world_rank()), int(ws), int(ctx.get_local_rank()), "ray")
    except Exception:
        # No active Train session (e.g. the driver process).
        return None


def resolve(rank=None, world_size=None, local_rank=None):
    """Return a :class:`DistInfo` following the order in the module doc."""
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank and world_size, or neither")
    if rank is not None:
        info = DistInfo(int(rank), int(world_size), int(local_rank if local_rank is not None else rank), "explicit")
    else:
        r, w = _env_int("RANK"), _env_int("WORLD_SIZE")
        if r is not None and w is not None:
            lr = _env_int("LOCAL_RANK")
            info = DistInfo(r, w, r if lr is None else lr, "env")
        else:
            info = _ray_context()
            if info is None:
                info = _torch_dist()
            if info is None:
                info = DistInfo(0, 1, 0, "single")
    if info.world_size < 1 or not 0 <= info.rank < info.world_size:
        raise ValueError(f"rank {info.rank} of world size {info.world_size} (from {info.source}) is out of range")
    return info


def _torch_dist():
    try:
        import torch.distributed as td
    except Exception:
        return None
    if td.is_available() and td.is_initialized():
        r = td.get_rank()
        return DistInfo(r, td.get_world_size(), _env_int("LOCAL_RANK") or 0, "torch.distributed")
    return None
