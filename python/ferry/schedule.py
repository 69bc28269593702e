"""The schedule both loaders share: which rows each rank's next batches hold,
where the job stands (epoch, consumed blocks, gradient-accumulation phase),
the resume state, and each optimizer step's loss-token count.

:class:`ferry.MappedLoader` (maps the shards) and :class:`ferry.ServeLoader`
(is fed by ``ferry-serve``) each own one :class:`Schedule` and differ only in
how a planned batch becomes tensors; their base :class:`ferry.BaseLoader`
gives both the same public methods (``set_epoch``, ``schedule``,
``state_dict``...) over it, so a state saved by one resumes the other.
"""

import os
import warnings

import numpy as np
import torch

from .errors import StateError
from .order import EpochOrder
from .packing import pack_kwargs
from .shards import ShardSet, read_loss_tokens

STATE_FORMAT = "ferry-loader"
STATE_VERSION = 1


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


class Cursor:
    """Where one iteration of a loader began (:meth:`Schedule.begin`): the
    epoch and the blocks the whole job had consumed, the
    gradient-accumulation phase and the start of its window, the epoch's
    :class:`EpochOrder` and the number of batches this rank yields. The
    loaders pass it back to :meth:`Schedule.extras` and
    :meth:`Schedule.advance` with the index of a batch."""

    __slots__ = ("epoch", "start", "phase", "window_start", "order", "batches")

    def __init__(self, epoch, start, phase, window_start, order, batches):
        self.epoch, self.start, self.phase, self.window_start = epoch, start, phase, window_start
        self.order, self.batches = order, batches

    def block(self, u, world_size, rank):
        """(shard, first row, rows) of this rank's batch u."""
        return self.order.block(self.start + u * world_size + rank)


class Schedule:
    """The global order as one rank walks it. ``manifest`` is a
    :class:`ferry.Manifest` (or the daemon's description of one); the other
    arguments are :class:`ferry.MappedLoader`'s."""

    def __init__(self, manifest, batch_size, rank, world_size, *, shuffle=True, seed=None, drop_last=False,
                 grad_accum=1):
        m = self.manifest = manifest
        self.rank, self.world_size = rank, world_size
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size = {batch_size}, want >= 1")
        self.shuffle = bool(shuffle)
        self.seed = int(m.seed if seed is None else seed)
        if self.seed < 0:
            raise ValueError(f"seed = {self.seed}, want >= 0")
        self.drop_last = bool(drop_last)
        self.grad_accum = int(grad_accum)
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum = {grad_accum}, want >= 1")
        self.epoch = 0
        self.consumed = 0
        self.phase = 0             # micro-batches of the current accumulation window already yielded
        self.window_start = None   # (epoch, consumed) of that window's first micro-batch when phase > 0
        self._order = None
        self._window = (None, 0, None)  # ((epoch, consumed), loss tokens, num_items_in_batch) of the last window
        self._count_orders = {}
        self._counter = None
        if self.order(0).G == 0:
            raise ValueError(
                f"{m.path}: batch_size {self.batch_size} > rows_per_rank {m.rows_per_rank} with drop_last=True: "
                "no batch to yield"
            )

    # -- order -----------------------------------------------------------
    def order(self, epoch):
        """The EpochOrder of ``epoch`` (the last one is kept)."""
        o = self._order
        if o is None or o.epoch != epoch:
            m = self.manifest
            o = EpochOrder(m.ranks, m.rows_per_rank, self.batch_size, epoch, self.seed, self.shuffle, self.drop_last)
            self._order = o
        return o

    def steps_per_epoch(self):
        return self.order(self.epoch).steps(0, self.world_size)

    def set_epoch(self, epoch):
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch = {epoch}, want >= 0")
        if epoch != self.epoch:
            self.epoch = epoch
            self.consumed = 0

    def begin(self):
        """Roll over to the next epoch when the current one is consumed;
        returns the iteration's start, a :class:`Cursor`."""
        if self.consumed and self.order(self.epoch).steps(self.consumed, self.world_size) == 0:
            self.epoch += 1
            self.consumed = 0
        o = self.order(self.epoch)
        return Cursor(self.epoch, self.consumed, self.phase, self.window_start, o, o.steps(self.consumed, self.world_size))

    def plan(self):
        """What the next iteration yields on this rank: a list of (shard,
        first row, rows), one per batch."""
        cur = self.begin()
        return [cur.block(u, self.world_size, self.rank) for u in range(cur.batches)]

    def advance(self, cur, m):
        """Position after m micro-batches of the iteration that began at
        ``cur``."""
        W, A = self.world_size, self.grad_accum
        self.consumed = cur.start + m * W
        self.phase = (cur.phase + m) % A
        if self.phase == 0:
            self.window_start = None
        else:
            k = (m - 1) - (cur.phase + m - 1) % A
            self.window_start = (cur.epoch, cur.start + k * W) if k >= 0 else cur.window_start

    def extras(self, batch, position_ids, pack, cur, u):
        """Add the pack-mode attention keys and num_items_in_batch to
        micro-batch u of the iteration that began at ``cur``."""
        if pack:
            batch.update(pack_kwargs(position_ids))
            batch["use_cache"] = False
        if self._counter is not None:
            batch["num_items_in_batch"] = self._step_items(cur, u)
        return batch

    # -- loss tokens (num_items_in_batch) ----------------------------------
    def count_loss_tokens(self, num_items_in_batch, directory, shards=None):
        """Set up the per-step loss-token count from the data set in the
        local ``directory``: its loss_tokens.u32, or else every shard.
        Returns None, or why it cannot (then batches carry no
        num_items_in_batch; ``num_items_in_batch=True`` raises instead)."""
        if num_items_in_batch not in (None, True, False):
            raise ValueError(f"num_items_in_batch = {num_items_in_batch!r}, want None (auto), True or False")
        self._counter = None
        if num_items_in_batch is False:
            return None
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
                return None
            files = m.files
            missing = [f["path"] for f in files if not os.path.exists(os.path.join(shards.directory, f["path"]))]
            if missing:
                why = (f"{len(missing)} of {len(files)} shards are not in {directory} (e.g. {missing[0]}), and it "
                       "has no loss_tokens.u32 (written by dataprep since this version: copy it with the manifest)")
        if why is None:
            self._counter = _ShardCounts(shards)
            return None
        msg = (f"{self.manifest.path}: batches carry no num_items_in_batch, so HF's loss takes each micro-batch's "
               f"own token mean: {why}; the step's token count needs every rank's rows")
        if num_items_in_batch:
            raise ValueError(msg)
        warnings.warn(msg + " (num_items_in_batch=False silences this)", stacklevel=3)
        return why

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

    def _step_items(self, cur, u):
        """num_items_in_batch of micro-batch u of the iteration that began
        at ``cur``: one tensor per window, shared by its micro-batches."""
        k = u - (cur.phase + u) % self.grad_accum
        key = (cur.epoch, cur.start + k * self.world_size) if k >= 0 else cur.window_start
        self.window_loss_tokens(*key)
        return self._window[2]

    # -- state -----------------------------------------------------------
    def state_dict(self):
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "dataset": self.manifest.fingerprint(),
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "epoch": self.epoch,
            "consumed_blocks": self.consumed,
            "world_size": self.world_size,
            # Gradient accumulation: micro-batches of the current optimizer
            # step already yielded, and where that step began.
            "grad_accum": self.grad_accum,
            "accum_phase": self.phase,
            "accum_window": None if self.window_start is None else list(self.window_start),
        }

    def load_state_dict(self, state):
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
        self.epoch, self.consumed = epoch, consumed
        self.phase, self.window_start = (phase, tuple(window)) if phase else (0, None)
