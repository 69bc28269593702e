"""ferry: feed PyTorch training from dataprep's mapped Arrow shards.

Pure Python on numpy and torch (pyarrow is used when present, never
required). The contract with the Go side is docs/shard-format.md.

Public API:

* :func:`Loader` - ``Loader(path, batch_size, ...)``: this rank's batches,
  a :class:`MappedLoader`, or with ``serve=SOCKET`` a :class:`ServeLoader`,
  so a trainer switches with one argument. Both are :class:`BaseLoader`\ s
  (the one loader interface: ``__iter__``, ``len``, ``set_epoch``,
  ``state_dict()``/``load_state_dict()`` exact resume, also onto a
  different world size, ``close``).
* :class:`MappedLoader` - the direct feed: an ``IterableDataset`` yielding
  this rank's batches as zero-copy tensor views of the mapped shard files,
  with per-epoch reshuffle.
* :class:`ServeLoader` - the same feed from the node's ``ferry-serve``
  daemon. Its errors: :class:`ServeError`, :class:`DaemonGone` (the daemon
  exited or was killed).
* :class:`DataLoader` - ``torch.utils.data.DataLoader`` over a loader that
  keeps the resume point exact with worker processes.
* :func:`to_device` - ``.to(device, non_blocking=True)`` + int64 ids on the
  device.
* :func:`check_packing` - refuses (:class:`PackingError`) a model on which
  pack-mode batches would let documents attend to each other;
  :func:`causal_lm_loss`, :func:`loss_tokens` - HF's causal-LM loss and its
  token count, for models that are not transformers models (see
  :mod:`ferry.packing`).
* :func:`loss_by_source` - a mixture's loss split by source (the loader's
  ``sources=True`` ids; :mod:`ferry.mixture`, docs/mixtures.md).
* :func:`data_dir_mismatches` - what a reused dataprep output was made for
  that a job does not want (tokenizer, seq_len, labels).
* :class:`ShardSet`, :func:`read_manifest` - the validated manifest and the
  mapped shards, for tools and tests.
* :func:`to_hf_dataset` - one shard as a Hugging Face ``datasets.Dataset``
  (needs pyarrow and datasets; ``Dataset.from_file`` cannot read the Arrow
  IPC file format, see :mod:`ferry.hf`).
* :func:`load_pretrained` - load a Hugging Face safetensors model into a
  model built on meta and sharded (FSDP2, FSDP1) or not, each rank reading
  only its shard's bytes (:mod:`ferry.load`).
* errors: :class:`FerryError` and its subclasses.

Optional, imported on its own: ``ferry.ray`` (needs Ray) - :func:`ferry.ray.prepare`
runs ``dataprep --part I/N`` as Ray tasks over a cluster, then ``dataprep commit``
(docs/scale-out.md). ``import ferry`` never imports Ray.
"""

from .dist import DistInfo, resolve as resolve_dist
from .errors import (CheckpointError, DaemonGone, FerryError, LoadError, ManifestError, MissingManifestError,
                     MissingShardError, PackingError, ProtocolError, ServeError, ShardError, StateError)
from .hf import to_hf_dataset
from .load import load_pretrained
from .loader import BaseLoader, DataLoader, Loader, MappedLoader, to_device
from .mixture import SourceLoss, loss_by_source, source_means
from .order import EpochOrder
from .packing import causal_lm_loss, check_packing, loss_tokens
from .serve_client import ServeLoader
from .shards import Manifest, ShardFile, ShardSet, data_dir_mismatches, read_manifest

__all__ = [
    "BaseLoader",
    "CheckpointError",
    "LoadError",
    "load_pretrained",
    "DaemonGone",
    "DataLoader",
    "DistInfo",
    "EpochOrder",
    "FerryError",
    "Loader",
    "Manifest",
    "MappedLoader",
    "ManifestError",
    "MissingManifestError",
    "MissingShardError",
    "PackingError",
    "ProtocolError",
    "ShardError",
    "ShardFile",
    "ServeError",
    "ServeLoader",
    "ShardSet",
    "SourceLoss",
    "StateError",
    "causal_lm_loss",
    "check_packing",
    "loss_tokens",
    "loss_by_source",
    "source_means",
    "data_dir_mismatches",
    "read_manifest",
    "resolve_dist",
    "to_device",
    "to_hf_dataset",
]

__version__ = "0.1.0"
