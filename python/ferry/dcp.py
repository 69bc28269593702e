"""Sharded checkpoints with torch.distributed.checkpoint (DCP) on any torch.

Every rank writes only its own shards (no rank-0 gather), which is what
``ckptmerge`` turns into Hugging Face safetensors. One call per torch
generation::

    torch >= 2.2   torch.distributed.checkpoint.save(sd, checkpoint_id=path)
    torch 2.0/2.1  torch.distributed.checkpoint.save_state_dict(sd, storage_writer=FileSystemWriter(path))
    torch 1.13     torch.distributed._shard.checkpoint.save_state_dict(sd, storage_writer=FileSystemWriter(path))

Pass a *flat* state dict (name -> tensor / ShardedTensor / DTensor, as
``model.state_dict()`` gives under FSDP's SHARDED_STATE_DICT); torch 1.13
does not flatten nested dicts. :func:`save_train_state` /
:func:`load_train_state` pick the right state dict for a model wrapped in
FSDP or DDP (and the optimizer, on torch >= 2.2).

Debian's torch 1.13 cannot import ``torch.distributed._shard`` on Python
3.11 (a dataclass field whose default is a mutable dataclass instance, which
3.11 refuses). :func:`_allow_mutable_dataclass_defaults` works around it for
the duration of that import only, by turning such defaults into a
``default_factory`` that deep-copies the value; nothing written to disk
changes.
"""

import contextlib
import copy
import dataclasses
import os
import sys


@contextlib.contextmanager
def _allow_mutable_dataclass_defaults():
    original = dataclasses._get_field

    def is_unhashable_dataclass(v):
        return dataclasses.is_dataclass(type(v)) and type(v).__hash__ is None

    def get_field(cls, name, type_, *args):
        default = cls.__dict__.get(name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            if default.default is not dataclasses.MISSING and is_unhashable_dataclass(default.default):
                value = default.default
                default.default = dataclasses.MISSING
                default.default_factory = lambda v=value: copy.deepcopy(v)
        elif default is not dataclasses.MISSING and is_unhashable_dataclass(default):
            setattr(cls, name, dataclasses.field(default_factory=lambda v=default: copy.deepcopy(v)))
        return original(cls, name, type_, *args)

    dataclasses._get_field = get_field
    try:
        yield
    finally:
        dataclasses._get_field = original


def _module():
    """(module, generation) where generation is 'new' (>= 2.2), '2.0' or '1.13'."""
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        with _allow_mutable_dataclass_defaults():
            import torch.distributed._shard.checkpoint as dcp
        return dcp, "1.13"
    if hasattr(dcp, "save") and hasattr(dcp, "load"):
        return dcp, "new"
    return dcp, "2.0"


def save(state_dict, path):
    """Write a sharded DCP checkpoint of ``state_dict`` to directory ``path``.
    Collective: every rank of the default process group calls it."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    dcp, gen = _module()
    if gen == "new":
        dcp.save(state_dict, checkpoint_id=path)
    else:
        dcp.save_state_dict(state_dict, storage_writer=dcp.FileSystemWriter(path))


def load(state_dict, path):
    """Load a DCP checkpoint in place into ``state_dict`` (whose tensors give
    the wanted shapes and shards). Collective."""
    path = os.fspath(path)
    dcp, gen = _module()
    if gen == "new":
        dcp.load(state_dict, checkpoint_id=path)
    else:
        dcp.load_state_dict(state_dict, storage_reader=dcp.FileSystemReader(path))


def _is_fsdp(model):
    # A model can only be FSDP-wrapped if FSDP was imported (and importing it
    # is what breaks on torch 1.13 + Python 3.11, so do not do it here).
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FullyShardedDataParallel)


def _unwrap_ddp(model):
    import torch.nn.parallel as par

    return model.module if isinstance(model, par.DistributedDataParallel) else model


def _modern_state_dict_api():
    try:
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    except ImportError:
        return None
    return get_state_dict, set_state_dict


def train_state_dict(model, optimizer=None):
    """The state dict to save for ``model`` (and ``optimizer``), sharded
    where the model is, and whether it holds the optimizer.

    torch >= 2.2: ``torch.distributed.checkpoint.state_dict.get_state_dict``
    (FSDP1/FSDP2/DDP/plain), ``{"model": ..., "optim": ...}``; ckptmerge
    names tensors without the ``model.`` root and leaves ``optim`` out.
    Older torch: the flat model state dict (FSDP's SHARDED_STATE_DICT, or
    the module inside DDP); the optimizer is not included."""
    api = _modern_state_dict_api()
    if api is not None:
        get_state_dict, _ = api
        if optimizer is None:
            msd, _ = get_state_dict(model, [])
            return {"model": msd}, False
        msd, osd = get_state_dict(model, optimizer)
        return {"model": msd, "optim": osd}, True
    if _is_fsdp(model):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            return model.state_dict(), False
    return _unwrap_ddp(model).state_dict(), False


def save_train_state(path, model, optimizer=None):
    """Sharded DCP checkpoint of the model (and optimizer on torch >= 2.2).
    Collective. Returns whether the optimizer state was saved."""
    sd, with_optim = train_state_dict(model, optimizer)
    save(sd, path)
    return with_optim


def load_train_state(path, model, optimizer=None):
    """Load what :func:`save_train_state` wrote into ``model`` (and
    ``optimizer`` when the checkpoint has it). Collective. Returns whether
    the optimizer state was restored."""
    sd, with_optim = train_state_dict(model, optimizer)
    load(sd, path)
    api = _modern_state_dict_api()
    if api is not None:
        _, set_state_dict = api
        if with_optim:
            set_state_dict(model, optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        else:
            set_state_dict(model, [], model_state_dict=sd["model"], optim_state_dict={})
        return with_optim
    if _is_fsdp(model):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            model.load_state_dict(sd)
    else:
        _unwrap_ddp(model).load_state_dict(sd)
    return False
