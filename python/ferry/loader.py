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
  ``Loader.copies`` counts them. dataprep's default ``batch_rows`` (1024) is a
  multiple of every power-of-two batch size.
* With ``DataLoader(num_workers>0)`` every batch crosses a process boundary,
  which torch does by copying it into shared memory. ``num_workers=0`` is the
  zero-copy path and the recommended one: the loader does no work worth a
  worker process.
* ``pin_memory=True`` copies into pinned memory; without it
  ``.to(device, non_blocking=True)`` from the mapping is a synchronous copy of
  pageable memory, which for a 4 x 1024 int32 batch is ~16 KiB per column.

Tensors keep their mapping alive: they stay valid after :meth:`Loader.close`
and across epochs. The mapping is private copy-on-write, so writing into a
batch tensor changes only this process's copy, never the shard file.

Resuming: :meth:`Loader.state_dict` is the same on every rank (epoch and the
number of blocks the whole job consumed), a small dict of ints and strings.
Save it with the checkpoint; :meth:`Loader.load_state_dict` on a restarted
job, with the same or a different world size, continues the same global
sample order at the next batch. Iterating again after a ``break`` also
continues where the previous loop stopped; an epoch that was fully consumed
rolls over to the next epoch, and :meth:`set_epoch` to another epoch restarts
at that epoch's beginning.
"""

import functools
import os
import warnings

import numpy as np
import torch
import torch.utils.data

from . import dist
from .errors import StateError
from .order import EpochOrder
from .packing import pack_kwargs
from .shards import ShardSet, read_loss_tokens

STATE_FORMAT = "ferry-loader"
STATE_VERSION = 1


# Above this seq_len the attention-mask table (4*(L+1)*L bytes) is not kept.
MASK_TABLE_MAX_SEQ_LEN = 2048


@functools.lru_cache(maxsize=4)
def _mask_table(L):
    if L > MASK_TABLE_MAX_SEQ_LEN:
        return None
    t = np.less(np.arange(L)[None, :], np.arange(L + 1)[:, None]).astype(np.int32)
    t.flags.writeable = False
    return t


class _LoaderMeta(type(torch.utils.data.IterableDataset)):
    """``Loader(..., serve=SOCKET)`` builds the daemon-fed loader instead."""

    def __call__(cls, *args, serve=None, **kwargs):
        if serve is None or serve is False or serve == "":
            return super().__call__(*args, **kwargs)
        if cls is not Loader:
            raise TypeError(f"{cls.__name__} does not take serve=; use ferry.Loader(..., serve=SOCKET)")
        from .serve_client import ServeLoader  # imports this module: import late

        return ServeLoader.from_loader_args(serve, *args, **kwargs)


class _RowCounts:
    """Per-rank prefix sums of the rows' loss tokens from dataprep's
    loss_tokens.u32 (one small file, read once)."""

    def __init__(self, counts):
        self._prefix = np.zeros((counts.shape[0], counts.shape[1] + 1), dtype=np.int64)
        np.cumsum(counts, axis=1, out=self._prefix[:, 1:])

    def prefix(self, rank):
        return self._prefix[rank]


class _ShardCounts:
    """The same, counted from the shards themselves (outputs without
    loss_tokens.u32): every shard must be readable here."""

    def __init__(self, shards):
        self._shards = shards

    def prefix(self, rank):
        return self._shards.shard(rank).loss_token_prefix()


class Loader(torch.utils.data.IterableDataset, metaclass=_LoaderMeta):
    """Yields this rank's batches of a dataprep output directory.

    ``Loader(path, batch_size, ..., serve=SOCKET)`` returns a
    :class:`ferry.ServeLoader` instead (a Loader subclass): the same batches
    in the same order, with the same state, fed by the node's ``ferry-serve``
    daemon listening on SOCKET (``serve=True``: ``$FERRY_SERVE_SOCKET`` or
    /tmp/ferry-serve.sock) rather than by mapping the shards in this
    process. ``path`` is then checked against the data set the daemon serves
    when it is a local dataprep directory; ``slots`` and ``timeout`` go to
    the ServeLoader; ``prefetch`` is the daemon's business and is ignored;
    ``verify="sha256"`` is refused (start ``ferry-serve --verify``).
    Differences to keep in mind: a served batch's tensors are views of a
    ring slot that is refilled once the *next* batch is requested (clone a
    batch to keep it longer; ``to_device`` to a GPU copies anyway).

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
        serve: the socket of this node's ``ferry-serve`` (``True``: the
            default socket): returns a :class:`ferry.ServeLoader` (see
            above). None, False or "" (default): this direct loader.
    """

    def __init__(self, path, batch_size, *, rank=None, world_size=None, shuffle=True, seed=None,
                 drop_last=False, verify="size", attention_mask=True, prefetch=True, grad_accum=1,
                 num_items_in_batch=None):
        super().__init__()
        self.shards = ShardSet(path, verify=verify)
        m = self.manifest = self.shards.manifest
        info = dist.resolve(rank, world_size)
        self.rank, self.world_size = info.rank, info.world_size
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size = {batch_size}, want >= 1")
        self.shuffle = bool(shuffle)
        self.seed = int(m.seed if seed is None else seed)
        if self.seed < 0:
            raise ValueError(f"seed = {self.seed}, want >= 0")
        self.drop_last = bool(drop_last)
        self.attention_mask = bool(attention_mask)
        self.prefetch = bool(prefetch)
        self.copies = 0
        self._epoch = 0
        self._consumed = 0
        self._order = None
        if self._epoch_order(0).G == 0:
            raise ValueError(
                f"{m.path}: batch_size {self.batch_size} > rows_per_rank {m.rows_per_rank} with drop_last=True: "
                "no batch to yield"
            )
        if any(b["row_start"] % self.batch_size for f in m.files for b in f["batches"]):
            warnings.warn(
                f"{m.path}: record batches of {m.batch_rows} rows are not a multiple of batch_size "
                f"{self.batch_size}: batches that straddle two record batches are copied (see Loader.copies)",
                stacklevel=2,
            )
        self._pack = m.mode == "pack"
        self._mask_table = _mask_table(m.seq_len) if not self._pack and self.attention_mask else None
        if self.world_size == m.ranks:
            # The common case: map (and check) our own shard now, so a bad
            # shard fails at construction, not at the first step.
            self.shards.shard(self.rank)
        self._init_loss_tokens(grad_accum, num_items_in_batch, self.shards.directory,
                               self.shards if verify == "size" else None)

    # -- loss tokens (num_items_in_batch) ----------------------------------
    def _init_loss_tokens(self, grad_accum, num_items_in_batch, directory, shards=None):
        """Set up the per-step loss-token count from the shards in
        ``directory`` (all of them must be readable here)."""
        self.grad_accum = int(grad_accum)
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum = {grad_accum}, want >= 1")
        if num_items_in_batch not in (None, True, False):
            raise ValueError(f"num_items_in_batch = {num_items_in_batch!r}, want None (auto), True or False")
        self._phase = 0              # micro-batches of the current accumulation window already yielded
        self._window_start = None    # (epoch, consumed) of that window's first micro-batch when _phase > 0
        self._window = (None, 0, None)  # ((epoch, consumed), loss tokens, num_items_in_batch) of the last window
        self._count_orders = {}
        self._counter = None
        if num_items_in_batch is False:
            return
        why = None
        if directory is None or "://" in str(directory):
            why = "no local copy of the data set directory (pass its path)"
        else:
            if shards is None:
                shards = ShardSet(directory, verify="size")
            m = shards.manifest
            if m.loss_tokens is not None and os.path.exists(os.path.join(shards.directory, m.loss_tokens["path"])):
                # dataprep's per-row counts: no other rank's shard is needed.
                self._counter = _RowCounts(read_loss_tokens(shards.directory, m))
                return
            files = m.files
            missing = [f["path"] for f in files if not os.path.exists(os.path.join(shards.directory, f["path"]))]
            if missing:
                why = (f"{len(missing)} of {len(files)} shards are not in {directory} (e.g. {missing[0]}), and it "
                       "has no loss_tokens.u32 (written by dataprep since this version: copy it with the manifest)")
        if why is None:
            self._counter = _ShardCounts(shards)
            return
        msg = (f"{self.manifest.path}: batches carry no num_items_in_batch, so HF's loss takes each micro-batch's "
               f"own token mean: {why}; the step's token count needs every rank's rows")
        if num_items_in_batch:
            raise ValueError(msg)
        warnings.warn(msg + " (num_items_in_batch=False silences this)", stacklevel=4)

    def _order_of(self, epoch):
        o = self._count_orders.get(epoch)
        if o is None:
            m = self.manifest
            if len(self._count_orders) > 2:
                self._count_orders.clear()
            o = EpochOrder(m.ranks, m.rows_per_rank, self.batch_size, epoch, self.seed, self.shuffle, self.drop_last)
            o.token_prefix = self._block_token_prefix(o)
            self._count_orders[epoch] = o
        return o

    def _block_token_prefix(self, o):
        """Prefix sums of the loss tokens of the epoch's global blocks 0..G-1."""
        R, per = o.R, o.per_shard
        counts = np.zeros((per, R), dtype=np.int64)
        for s in range(R):
            p = self._counter.prefix(s)
            first = np.empty(per, dtype=np.int64)
            first[:o.full] = o.perm(s) * o.B
            if o.partial:
                first[o.full:] = o.full * o.B
            rows = np.full(per, o.B, dtype=np.int64)
            rows[o.full:] = o.partial
            counts[:, s] = p[first + rows] - p[first]
        prefix = np.zeros(o.G + 1, dtype=np.int64)
        np.cumsum(counts.reshape(-1), out=prefix[1:])
        return prefix

    def window_loss_tokens(self, epoch, consumed):
        """Loss tokens of the accumulation window that starts at (epoch,
        consumed blocks): ``grad_accum`` micro-batches of every rank, rolling
        over into the next epoch(s) like iteration does."""
        key = (epoch, consumed)
        if self._window[0] == key:
            return self._window[1]
        W, e, c, left, n = self.world_size, epoch, consumed, self.grad_accum, 0
        while left:
            o = self._order_of(e)
            while o.steps(c, W) == 0:
                e, c = e + 1, 0
                o = self._order_of(e)
            k = min(left, o.steps(c, W))
            # Blocks [c, c + k*W), wrapping past the epoch's end like EpochOrder.block.
            g, todo, P = c, k * W, o.token_prefix
            while todo:
                g %= o.G
                take = min(todo, o.G - g)
                n += int(P[g + take] - P[g])
                g, todo = g + take, todo - take
            c, left = c + k * W, left - k
        items = torch.from_numpy(np.array(max(n, 1) / (self.world_size * self.grad_accum), dtype=np.float32))
        self._window = (key, n, items)
        return n

    def _step_items(self, epoch, start, p0, ws0, u):
        """num_items_in_batch of micro-batch u of an iteration that began at
        (epoch, start) with phase p0 (window start ws0 when p0 > 0): one
        tensor per window, shared by its micro-batches."""
        k = u - (p0 + u) % self.grad_accum
        key = (epoch, start + k * self.world_size) if k >= 0 else ws0
        self.window_loss_tokens(*key)
        return self._window[2]

    def _advance(self, epoch, start, p0, ws0, m):
        """Position after m micro-batches of an iteration that began at
        (epoch, start) with phase p0."""
        W, A = self.world_size, self.grad_accum
        self._consumed = start + m * W
        self._phase = (p0 + m) % A
        if self._phase == 0:
            self._window_start = None
        else:
            k = (m - 1) - (p0 + m - 1) % A
            self._window_start = (epoch, start + k * W) if k >= 0 else ws0

    def _extras(self, batch, position_ids, epoch, start, p0, ws0, u):
        """Add the pack-mode attention keys and num_items_in_batch."""
        if self._pack:
            batch.update(pack_kwargs(position_ids))
            batch["use_cache"] = False
        if self._counter is not None:
            batch["num_items_in_batch"] = self._step_items(epoch, start, p0, ws0, u)
        return batch

    # -- order -----------------------------------------------------------
    def _epoch_order(self, epoch):
        o = self._order
        if o is None or o.epoch != epoch:
            m = self.manifest
            o = EpochOrder(m.ranks, m.rows_per_rank, self.batch_size, epoch, self.seed, self.shuffle,
                           self.drop_last)
            self._order = o
        return o

    @property
    def epoch(self):
        return self._epoch

    @property
    def steps_per_epoch(self):
        """Batches every rank yields in a whole epoch at this world size."""
        return self._epoch_order(self._epoch).steps(0, self.world_size)

    def __len__(self):
        return self.steps_per_epoch

    def set_epoch(self, epoch):
        """Select the epoch to iterate. A different epoch starts at its first
        batch; the current epoch keeps its position (so calling set_epoch
        after load_state_dict does not lose the resume point)."""
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch = {epoch}, want >= 0")
        if epoch != self._epoch:
            self._epoch = epoch
            self._consumed = 0

    def _begin(self):
        """Roll over to the next epoch when the current one is consumed."""
        if self._consumed and self._epoch_order(self._epoch).steps(self._consumed, self.world_size) == 0:
            self._epoch += 1
            self._consumed = 0

    def schedule(self):
        """What the next iteration yields on this rank (without workers):
        a list of (shard, first row, rows), one per batch."""
        self._begin()
        o = self._epoch_order(self._epoch)
        W, c = self.world_size, self._consumed
        return [o.block(c + u * W + self.rank) for u in range(o.steps(c, W))]

    # -- iteration -------------------------------------------------------
    def __iter__(self):
        self._begin()
        epoch, start, W, w = self._epoch, self._consumed, self.world_size, self.rank
        o = self._epoch_order(epoch)
        n = o.steps(start, W)
        wi = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if wi is None else (wi.id, wi.num_workers)
        if self.prefetch and W == self.manifest.ranks and n > wid:
            self.shards.shard(w).prefetch()
        shards, rows, counts = o.blocks(start + wid * W + w, len(range(wid, n, nw)), nw * W)
        get, from_numpy, pack, mask = self.shards.shard, torch.from_numpy, self._pack, self.attention_mask
        p0, ws0 = self._phase, self._window_start
        for j, u in enumerate(range(wid, n, nw)):
            ids, labels, third, view = get(shards[j]).view(rows[j], counts[j])
            if not view:
                self.copies += 1
            if pack:
                batch = {"input_ids": from_numpy(ids), "labels": from_numpy(labels), "position_ids": from_numpy(third)}
            elif mask:
                batch = {"input_ids": from_numpy(ids), "attention_mask": self._mask(third), "labels": from_numpy(labels)}
            else:
                batch = {"input_ids": from_numpy(ids), "length": from_numpy(third), "labels": from_numpy(labels)}
            self._extras(batch, third, epoch, start, p0, ws0, u)
            # Advance before yielding: state_dict() taken while the caller
            # holds batch u resumes at batch u+1.
            self._advance(epoch, start, p0, ws0, u + 1)
            yield batch

    def _mask(self, length):
        if self._mask_table is not None:
            # Row n of the table is n ones then zeros: one gather per batch.
            return torch.from_numpy(self._mask_table.take(length, axis=0))
        L = self.manifest.seq_len
        return torch.from_numpy(np.less(np.arange(L, dtype=np.int32), length[:, None],
                                        out=np.empty((len(length), L), np.int32)))

    # -- state -----------------------------------------------------------
    def state_dict(self):
        """The resume point: identical on every rank; plain ints and strings."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "dataset": self.manifest.fingerprint(),
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "epoch": self._epoch,
            "consumed_blocks": self._consumed,
            "world_size": self.world_size,
            # Gradient accumulation: micro-batches of the current optimizer
            # step already yielded, and where that step began.
            "grad_accum": self.grad_accum,
            "accum_phase": self._phase,
            "accum_window": None if self._window_start is None else list(self._window_start),
        }

    def load_state_dict(self, state):
        """Resume at the batch after the one that was last yielded when
        ``state`` was taken, on any world size."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise StateError(f"not a ferry loader state: {state!r:.200}")
        if state.get("version") != STATE_VERSION:
            raise StateError(f"loader state version {state.get('version')!r}, this loader reads {STATE_VERSION}")
        mine = self.state_dict()
        for k in ("dataset", "batch_size", "seed", "shuffle", "drop_last"):
            if state.get(k) != mine[k]:
                what = "data set (manifest fingerprint)" if k == "dataset" else k
                raise StateError(
                    f"{self.manifest.path}: loader state was saved with {k} = {state.get(k)!r}, this loader has "
                    f"{mine[k]!r}; the {what} must match to continue the same sample order"
                )
        epoch, consumed = state.get("epoch"), state.get("consumed_blocks")
        if not (isinstance(epoch, int) and epoch >= 0 and isinstance(consumed, int) and consumed >= 0):
            raise StateError(f"loader state has epoch={epoch!r}, consumed_blocks={consumed!r}")
        phase, window = state.get("accum_phase", 0), state.get("accum_window")
        if phase:
            # Saved in the middle of an optimizer step: the rest of the step
            # must be the same micro-batches, so nothing may change.
            if not (isinstance(phase, int) and isinstance(window, (list, tuple)) and len(window) == 2
                    and all(isinstance(x, int) and x >= 0 for x in window)):
                raise StateError(f"loader state has accum_phase={phase!r}, accum_window={window!r}")
            for k, mine_v in (("grad_accum", self.grad_accum), ("world_size", self.world_size)):
                if state.get(k) != mine_v:
                    raise StateError(
                        f"{self.manifest.path}: loader state was saved after {phase} of the {state.get('grad_accum')} "
                        f"micro-batches of an optimizer step with {k} = {state.get(k)!r}; this loader has "
                        f"{mine_v!r}: resume with the same {k}, or save at optimizer-step boundaries"
                    )
            if not 0 < phase < self.grad_accum:
                raise StateError(f"loader state has accum_phase={phase!r}, want 0..{self.grad_accum - 1}")
        self._epoch, self._consumed = epoch, consumed
        self._phase, self._window_start = (phase, tuple(window)) if phase else (0, None)

    def close(self):
        """Unmap the shards (tensors already yielded stay valid)."""
        self.shards.close()


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader`` over a :class:`Loader` that keeps the
    Loader's resume point exact with worker processes.

    Workers each take a disjoint, interleaved part of the rank's batches
    (worker i yields batches i, i+N, ...) and torch's in-order delivery puts
    them back in the order ``num_workers=0`` gives. The plain torch
    ``DataLoader(loader, batch_size=None, num_workers=N)`` works the same way
    but cannot tell the Loader in the main process how far it got; this
    subclass counts delivered batches, so ``state_dict()`` is exact.
    ``persistent_workers`` is refused: the workers must see each epoch's
    start position.
    """

    def __init__(self, dataset, num_workers=0, **kwargs):
        if not isinstance(dataset, Loader):
            raise TypeError(f"ferry.DataLoader wants a ferry.Loader, got {type(dataset).__name__}")
        if kwargs.get("batch_size") is not None:
            raise ValueError("ferry.Loader yields whole batches: leave batch_size unset (None)")
        if kwargs.get("persistent_workers"):
            raise ValueError("persistent_workers=True is not supported: workers must restart each epoch")
        kwargs["batch_size"] = None
        super().__init__(dataset, num_workers=num_workers, **kwargs)

    def __iter__(self):
        ds = self.dataset
        ds._begin()
        epoch, start, p0, ws0 = ds._epoch, ds._consumed, ds._phase, ds._window_start
        for n, batch in enumerate(super().__iter__(), 1):
            ds._advance(epoch, start, p0, ws0, n)
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
