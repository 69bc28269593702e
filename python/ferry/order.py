"""The per-epoch global order of batches, independent of the world size.

The unit of order is a *block*: ``batch_size`` consecutive rows of one shard
(block ``k`` of shard ``s`` = rows ``[k*B, (k+1)*B)``). A block is one batch,
and since its rows are contiguous in the mapped file (when ``batch_rows`` is a
multiple of ``B``) it is handed out as a zero-copy view.

Epoch ``e`` orders the blocks of every shard with its own seeded permutation
``perm[s]`` (``numpy.random.Generator(PCG64(SeedSequence([seed, e, s])))``;
the identity when shuffle is off), then interleaves the shards the same way
dataprep interleaves rows (position p -> shard p % ranks)::

    global block g  ->  shard s = g % R,  block perm[s][g // R]

    g:      0      1      2    ...   R-1    R      R+1  ...
    shard:  0      1      2    ...   R-1    0      1    ...
    block:  p0[0]  p1[0]  p2[0]      ...    p0[1]  p1[1]

A job with world size W consumes the global sequence W blocks per step:
rank w takes g = c + u*W + w at its step u, where c is the number of blocks
consumed before (0 at the start of an epoch). With W == R (the dataprep rank
count) rank w reads only shard w. With another W the same sequence is simply
cut differently, which is what makes resuming on a different world size keep
the global order: the state is just (epoch, c).

Tail policy, so that every rank takes the same number of steps:

* a shard whose row count is not a multiple of B has one *partial* block (the
  last rows); ``drop_last=False`` puts the R partial blocks at the end of the
  epoch (one smaller last batch per rank when W == R), ``drop_last=True``
  leaves them out;
* when the blocks left (G - c) are not a multiple of W, ``drop_last=True``
  drops the remainder and ``drop_last=False`` wraps around to the first blocks
  of the epoch (as DistributedSampler pads), so a few batches repeat.
"""

import numpy as np


class EpochOrder:
    """Block order of one epoch. Pure arithmetic; no I/O."""

    def __init__(self, ranks, rows_per_rank, batch_size, epoch, seed, shuffle, drop_last):
        if batch_size < 1:
            raise ValueError(f"batch_size = {batch_size}, want >= 1")
        self.R = ranks
        self.rows = rows_per_rank
        self.B = batch_size
        self.epoch = epoch
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.full = rows_per_rank // batch_size
        self.partial = 0 if drop_last else rows_per_rank % batch_size
        self.per_shard = self.full + (1 if self.partial else 0)
        self.G = ranks * self.per_shard
        self._perm = {}

    def perm(self, shard):
        p = self._perm.get(shard)
        if p is None:
            if self.shuffle:
                rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, self.epoch, shard])))
                p = rng.permutation(self.full)
            else:
                p = np.arange(self.full)
            self._perm[shard] = p
        return p

    def steps(self, consumed, world):
        """Steps every rank takes from ``consumed`` blocks to the epoch end."""
        left = self.G - consumed
        if left <= 0:
            return 0
        return left // world if self.drop_last else -(-left // world)

    def block(self, g):
        """(shard, first row, rows) of global block g (wrapping past the end)."""
        if self.G == 0:
            raise IndexError("the epoch has no blocks")
        g %= self.G
        s, t = g % self.R, g // self.R
        if t < self.full:
            k = int(self.perm(s)[t])
            return s, k * self.B, self.B
        return s, self.full * self.B, self.partial

    def blocks(self, first, count, stride):
        """Blocks first, first+stride, ... (count of them) as three lists
        (shards, first rows, row counts); the same as block() on each."""
        if count <= 0:
            return [], [], []
        if self.G == 0:
            raise IndexError("the epoch has no blocks")
        g = (first + stride * np.arange(count, dtype=np.int64)) % self.G
        s, t = g % self.R, g // self.R
        rows = np.full(count, self.B, dtype=np.int64)
        start = np.empty(count, dtype=np.int64)
        full = t < self.full
        for shard in np.unique(s[full]).tolist():
            sel = full & (s == shard)
            start[sel] = self.perm(shard)[t[sel]] * self.B
        start[~full] = self.full * self.B
        rows[~full] = self.partial
        return s.tolist(), start.tolist(), rows.tolist()
