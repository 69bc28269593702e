"""The direct feed: each rank maps shards and yields zero-copy batches.

Quick use (torchrun or Ray Train set the rank; see :mod:`ferry.dist`)::

    loader = ferry.Loader("/Volumes/x/alpaca-qwen", batch_size=4, drop_last=True)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            batch = ferry.to_device(batch, device)   # .to(device, non_blocking=True), ids -> int64 on the GPU
            loss = model(**batch).loss

Batches are dicts for ``model(**batch)``: ``input_ids``, ``attention_mask``,
``labels`` (pad mode) or ``input_ids``, ``labels``, ``position_ids`` plus
``cu_seq_lens_q/k``, ``max_length_q/k`` and ``use_cache=False`` (pack mode:
the keys that keep the documents of a row apart on every attention
implementation, see :mod:`ferry.packing`), and in both modes
``num_items_in_batch`` (the step's loss-token count that makes HF's loss the
global token mean). ``input_ids``, ``labels`` and ``position_ids`` are int32
*views of the mapped shard file*: nothing is copied on the host.
``attention_mask`` (int32) is computed from the per-row ``length`` column
(B x L; pass ``attention_mask=False`` to get the ``length`` column, a view,
instead and build the mask on the GPU); ``cu_seq_lens`` from
``position_ids``.

Copy policy, stated honestly:

* Order is shuffled per epoch at the granularity of blocks of ``batch_size``
  consecutive rows of one shard (see :mod:`ferry.order`); rows inside a block
  keep their order, so every batch is one contiguous slice of the file. The
  rows themselves were already shuffled once by dataprep (``--seed``), so a
  block is a random group of rows; the grouping is the same every epoch, the
  order of the groups is not.
* When the manifest's ``batch_rows`` is not a multiple of ``batch_size``, a
  block that straddles two Arrow record batches is concatenated (copied);
  ``MappedLoader.copies`` counts them. dataprep's default ``batch_rows`` (1024) is a
  multiple of every power-of-two batch size.
* With ``DataLoader(num_workers>0)`` every batch crosses a process boundary,
  which torch does by copying it into shared memory. ``num_workers=0`` is the
  zero-copy path and the recommended one: the loader does no work worth a
  worker process.
* ``pin_memory=True`` copies into pinned memory; without it
  ``.to(device, non_blocking=True)`` from the mapping is a synchronous copy of
  pageable memory, which for a 4 x 1024 int32 batch is ~16 KiB per column.

Tensors keep their mapping alive: they stay valid after :meth:`MappedLoader.close`
and across epochs. The mapping is private copy-on-write, so writing into a
batch tensor changes only this process's copy, never the shard file.

Resuming: :meth:`BaseLoader.state_dict` is the same on every rank (epoch and the
number of blocks the whole job consumed), a small dict of ints and strings.
Save it with the checkpoint; :meth:`BaseLoader.load_state_dict` on a restarted
job, with the same or a different world size, continues the same global
sample order at the next batch. Iterating again after a ``break`` also
continues where the previous loop stopped; an epoch that was fully consumed
rolls over to the next epoch, and :meth:`set_epoch` to another epoch restarts
at that epoch's beginning.
"""

import abc
import functools
import warnings

import numpy as np
import torch
import torch.utils.data

from . import dist
from .schedule import Schedule
from .shards import ShardSet


# Above this seq_len the attention-mask table (4*(L+1)*L bytes) is not kept.
MASK_TABLE_MAX_SEQ_LEN = 2048


@functools.lru_cache(maxsize=4)
def _mask_table(L):
    if L > MASK_TABLE_MAX_SEQ_LEN:
        return None
    t = np.less(np.arange(L)[None, :], np.arange(L + 1)[:, None]).astype(np.int32)
    t.flags.writeable = False
    return t


class BaseLoader(torch.utils.data.IterableDataset):
    """What every ferry loader is: an ``IterableDataset`` of this rank's
    batches that owns a :class:`ferry.schedule.Schedule`.

    :class:`MappedLoader` (maps the shards) and :class:`ferry.ServeLoader`
    (fed by ``ferry-serve``) subclass it and differ only in how a planned
    batch becomes tensors (``__iter__``) and what they hold (``close``). The
    rest, the order, epochs and resume state, is the schedule's and lives
    here once, so a state saved by one loader resumes the other. Besides the
    methods below a loader has ``rank``, ``world_size``, ``manifest``,
    ``attention_mask``, ``sources``, ``source_names`` and ``copies``.
    ``isinstance(x, ferry.BaseLoader)`` holds for both.
    """

    batch_size = property(lambda self: self._sched.batch_size)
    shuffle = property(lambda self: self._sched.shuffle)
    seed = property(lambda self: self._sched.seed)
    drop_last = property(lambda self: self._sched.drop_last)
    grad_accum = property(lambda self: self._sched.grad_accum)

    @abc.abstractmethod
    def __iter__(self):
        """This rank's next batches (see :meth:`set_epoch`), advancing the
        schedule as each batch is yielded."""

    @abc.abstractmethod
    def close(self):
        """Let go of the shards or the daemon; tensors already yielded stay
        valid."""

    @property
    def epoch(self):
        return self._sched.epoch

    @property
    def steps_per_epoch(self):
        """Batches every rank yields in a whole epoch at this world size."""
        return self._sched.steps_per_epoch()

    def __len__(self):
        return self.steps_per_epoch

    def set_epoch(self, epoch):
        """Select the epoch to iterate. A different epoch starts at its first
        batch; the current epoch keeps its position (so calling set_epoch
        after load_state_dict does not lose the resume point)."""
        self._sched.set_epoch(epoch)

    def schedule(self):
        """What the next iteration yields on this rank (without workers):
        a list of (shard, first row, rows), one per batch."""
        return self._sched.plan()

    def window_loss_tokens(self, epoch, consumed):
        """Loss tokens of the accumulation window that starts at (epoch,
        consumed blocks) (see :meth:`Schedule.window_loss_tokens`)."""
        return self._sched.window_loss_tokens(epoch, consumed)

    def state_dict(self):
        """The resume point: identical on every rank; plain ints and strings."""
        return self._sched.state_dict()

    def load_state_dict(self, state):
        """Resume at the batch after the one that was last yielded when
        ``state`` was taken, on any world size."""
        self._sched.load_state_dict(state)


def Loader(path, batch_size, *, serve=None, **kwargs):
    """This rank's batches of a dataprep output directory: a
    :class:`MappedLoader` (the shards mapped in this process), or with
    ``serve=SOCKET`` a :class:`ferry.ServeLoader` fed by the node's
    ``ferry-serve`` daemon listening on SOCKET (``serve=True``:
    ``$FERRY_SERVE_SOCKET`` or /tmp/ferry-serve.sock). Both are
    :class:`BaseLoader`\ s: the same batches in the same order, with the same
    state, so a trainer switches with one argument.

    The keyword arguments are :class:`MappedLoader`'s. With ``serve=``,
    ``path`` is checked against the data set the daemon serves when it is a
    local dataprep directory; ``slots`` and ``timeout`` go to the
    ServeLoader; ``prefetch`` is the daemon's business and is ignored;
    ``verify="sha256"`` is refused (start ``ferry-serve --verify``).
    Differences to keep in mind: a served batch's tensors are views of a
    ring slot that is refilled once the *next* batch is requested (clone a
    batch to keep it longer; ``to_device`` to a GPU copies anyway).
    """
    if serve is None or serve is False or serve == "":
        return MappedLoader(path, batch_size, **kwargs)
    from .serve_client import ServeLoader  # the daemon's client: imported only when asked for

    return ServeLoader.from_loader_args(serve, path, batch_size, **kwargs)


class MappedLoader(BaseLoader):
    """Yields this rank's batches of a dataprep output directory from its
    shards, mapped in this process (what ``ferry.Loader(path, batch_size)``
    returns).

    Args:
        path: the dataprep output directory (with manifest.json).
        batch_size: rows per batch (per rank).
        rank, world_size: explicit placement; by default from torchrun's
            environment, Ray Train's context or torch.distributed.
        shuffle: reshuffle the block order every epoch (default True).
        seed: shuffle seed (default: the manifest's dataprep seed).
        drop_last: leave out partial batches and the uneven tail (default
            False: partial batches come last; an uneven tail wraps around).
        verify: "size" (default) or "sha256" (check each shard's checksum
            when it is first mapped).
        attention_mask: pad mode: yield ``attention_mask`` (default) or the
            ``length`` column (a view) instead.
        prefetch: at the start of each epoch, ask the kernel to read this
            rank's shard ahead (madvise WILLNEED, shards up to 1 GiB;
            default True).
        grad_accum: micro-batches per optimizer step (default 1); sets the
            step that ``num_items_in_batch`` counts. Step the optimizer
            after every ``grad_accum`` batches, counted across epochs from
            the first batch (or the resume point).
        num_items_in_batch: put ``num_items_in_batch`` = (loss tokens of the
            ``grad_accum`` micro-batches of all ranks) / (world_size *
            grad_accum) in every batch: with ``(loss / grad_accum)
            .backward()`` and DDP/FSDP's gradient averaging, HF's loss is then
            the exact mean over the step's loss tokens (see
            :mod:`ferry.packing`). None (default): when every shard is
            readable here (a warning otherwise); True: required; False: off.
        sources: add ``source_ids`` to every batch: an int32 (B x L) tensor
            with each token's source, its index in the manifest's
            ``sources`` (a mixture made with ``dataprep --recipe``; 0 for
            data of one input), and -1 on padding. Off by default: remove
            it before ``model(**batch)``; :func:`ferry.loss_by_source`
            splits the loss with it (docs/mixtures.md).
    """

    def __init__(self, path, batch_size, *, rank=None, world_size=None, shuffle=True, seed=None,
                 drop_last=False, verify="size", attention_mask=True, prefetch=True, grad_accum=1,
                 num_items_in_batch=None, sources=False):
        super().__init__()
        self.shards = ShardSet(path, verify=verify)
        m = self.manifest = self.shards.manifest
        info = dist.resolve(rank, world_size)
        self.rank, self.world_size = info.rank, info.world_size
        self._sched = Schedule(m, batch_size, self.rank, self.world_size, shuffle=shuffle, seed=seed,
                               drop_last=drop_last, grad_accum=grad_accum)
        self.attention_mask = bool(attention_mask)
        self.prefetch = bool(prefetch)
        self.sources = bool(sources)
        # source names in id order: the mixture's, or the one input's
        self.source_names = [s["name"] for s in m.sources] or ["data"]
        self.copies = 0
        if any(b["row_start"] % self.batch_size for f in m.files for b in f["batches"]):
            warnings.warn(
                f"{m.path}: record batches of {m.batch_rows} rows are not a multiple of batch_size "
                f"{self.batch_size}: batches that straddle two record batches are copied (see MappedLoader.copies)",
                stacklevel=2,
            )
        self._pack = m.mode == "pack"
        self._mask_table = _mask_table(m.seq_len) if not self._pack and self.attention_mask else None
        if self.world_size == m.ranks:
            # The common case: map (and check) our own shard now, so a bad
            # shard fails at construction, not at the first step.
            self.shards.shard(self.rank)
        self._sched.count_loss_tokens(num_items_in_batch, self.shards.directory,
                                      self.shards if verify == "size" else None)

    # -- iteration -------------------------------------------------------
    def __iter__(self):
        sched = self._sched
        cur = sched.begin()
        W, w, n = self.world_size, self.rank, cur.batches
        wi = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if wi is None else (wi.id, wi.num_workers)
        if self.prefetch and W == self.manifest.ranks and n > wid:
            self.shards.shard(w).prefetch()
        shards, rows, counts = cur.order.blocks(cur.start + wid * W + w, len(range(wid, n, nw)), nw * W)
        get, from_numpy, pack, mask = self.shards.shard, torch.from_numpy, self._pack, self.attention_mask
        for j, u in enumerate(range(wid, n, nw)):
            sf = get(shards[j])
            ids, labels, third, view = sf.view(rows[j], counts[j])
            if not view:
                self.copies += 1
            if pack:
                batch = {"input_ids": from_numpy(ids), "labels": from_numpy(labels), "position_ids": from_numpy(third)}
            elif mask:
                batch = {"input_ids": from_numpy(ids), "attention_mask": self._mask(third), "labels": from_numpy(labels)}
            else:
                batch = {"input_ids": from_numpy(ids), "length": from_numpy(third), "labels": from_numpy(labels)}
            if self.sources:
                batch["source_ids"] = from_numpy(sf.source_ids(rows[j], counts[j]))
            sched.extras(batch, third, pack, cur, u)
            # Advance before yielding: state_dict() taken while the caller
            # holds batch u resumes at batch u+1.
            sched.advance(cur, u + 1)
            yield batch

    def _mask(self, length):
        if self._mask_table is not None:
            # Row n of the table is n ones then zeros: one gather per batch.
            return torch.from_numpy(self._mask_table.take(length, axis=0))
        L = self.manifest.seq_len
        return torch.from_numpy(np.less(np.arange(L, dtype=np.int32), length[:, None],
                                        out=np.empty((len(length), L), np.int32)))

    def close(self):
        """Unmap the shards (tensors already yielded stay valid)."""
        self.shards.close()


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader`` over a ferry loader (a
    :class:`BaseLoader`) that keeps the loader's resume point exact with worker processes.

    Workers each take a disjoint, interleaved part of the rank's batches
    (worker i yields batches i, i+N, ...) and torch's in-order delivery puts
    them back in the order ``num_workers=0`` gives. The plain torch
    ``DataLoader(loader, batch_size=None, num_workers=N)`` works the same way
    but cannot tell the loader in the main process how far it got; this
    subclass counts delivered batches, so ``state_dict()`` is exact.
    ``persistent_workers`` is refused: the workers must see each epoch's
    start position.
    """

    def __init__(self, dataset, num_workers=0, **kwargs):
        if not isinstance(dataset, BaseLoader):
            raise TypeError(f"ferry.DataLoader wants a ferry loader (ferry.BaseLoader), got {type(dataset).__name__}")
        if kwargs.get("batch_size") is not None:
            raise ValueError("ferry.Loader yields whole batches: leave batch_size unset (None)")
        if kwargs.get("persistent_workers"):
            raise ValueError("persistent_workers=True is not supported: workers must restart each epoch")
        kwargs["batch_size"] = None
        super().__init__(dataset, num_workers=num_workers, **kwargs)

    def __iter__(self):
        sched = self.dataset._sched
        cur = sched.begin()
        for n, batch in enumerate(super().__iter__(), 1):
            sched.advance(cur, n)
            yield batch

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)


INT_KEYS = ("input_ids", "labels", "position_ids")
FIRST_KEYS = ("input_ids", "attention_mask", "labels", "position_ids")


def to_device(batch, device, non_blocking=True):
    """Move a batch to ``device`` and cast ids/labels/position_ids to int64
    there (int32 on the wire halves the transfer; losses want int64).

    ``cu_seq_lens_q/k`` stay int32 (what flash-attention kernels take) and
    are moved once (they are the same tensor); plain values (``max_length_q``,
    ``use_cache``) pass through. In pad mode with ``attention_mask=False``
    the ``length`` column is turned into ``attention_mask`` on the device.
    Keys come out as ``input_ids``, ``attention_mask``, ``labels``,
    ``position_ids`` (those present), then the rest in batch order."""
    out, moved = {}, {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            t = moved.get(id(v))
            if t is None:
                t = moved[id(v)] = v.to(device, non_blocking=non_blocking)
            v = t.long() if k in INT_KEYS else t
        out[k] = v
    if "length" in out:
        n = out.pop("length")
        L = out["input_ids"].shape[1]
        out["attention_mask"] = (torch.arange(L, device=n.device) < n.unsqueeze(1)).long()
    first = {k: out.pop(k) for k in FIRST_KEYS if k in out}
    first.update(out)
    return first
