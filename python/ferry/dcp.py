"""Sharded checkpoints with torch.distributed.checkpoint (DCP), torch >= 2.4.

Every rank writes only its own shards (no rank-0 gather), which is what
``ckptmerge`` turns into Hugging Face safetensors. :func:`save_train_state`
/ :func:`load_train_state` save and restore a model wrapped in FSDP1, FSDP2
(``fully_shard``), DDP or nothing, and its optimizer, through
``torch.distributed.checkpoint.state_dict.get_state_dict`` /
``set_state_dict``: the checkpoint holds ``{"model": ..., "optim": ...}``;
ckptmerge names the tensors without the ``model.`` root and leaves ``optim``
out (``--include-optimizer`` keeps it).
"""

import os

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def save(state_dict, path):
    """Write a sharded DCP checkpoint of ``state_dict`` to directory ``path``.
    Collective: every rank of the default process group calls it."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    dcp.save(state_dict, checkpoint_id=path)


def load(state_dict, path):
    """Load a DCP checkpoint in place into ``state_dict`` (whose tensors give
    the wanted shapes and shards). Collective."""
    dcp.load(state_dict, checkpoint_id=os.fspath(path))


def train_state_dict(model, optimizer=None):
    """The state dict to save for ``model`` (and ``optimizer``), sharded
    where the model is, and whether it holds the optimizer:
    ``{"model": ..., "optim": ...}`` from ``get_state_dict``."""
    if optimizer is None:
        msd, _ = get_state_dict(model, [])
        return {"model": msd}, False
    msd, osd = get_state_dict(model, optimizer)
    return {"model": msd, "optim": osd}, True


def save_train_state(path, model, optimizer=None):
    """Sharded DCP checkpoint of the model (and optimizer). Collective.
    Returns whether the optimizer state was saved."""
    sd, with_optim = train_state_dict(model, optimizer)
    save(sd, path)
    return with_optim


def load_train_state(path, model, optimizer=None):
    """Load what :func:`save_train_state` wrote into ``model`` (and
    ``optimizer`` when given). Collective. Returns whether the optimizer
    state was restored."""
    sd, with_optim = train_state_dict(model, optimizer)
    load(sd, path)
    if with_optim:
        set_state_dict(model, optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    else:
        set_state_dict(model, [], model_state_dict=sd["model"], optim_state_dict={})
    return with_optim
